// Tensor parallelism (two stacked Megatron-LM MLP blocks) written with the
// recorded collectives of mg::distributed::functional: in each block the
// first Linear is split by output columns, the second by input rows;
// copy_to_parallel_region ("f") brings the replicated input in and
// reduce_from_parallel_region ("g") joins the partial sums. It trains with
// autocast and a GradScaler, then rank 0 trains the same model whole in one
// process, on the same data from the same start, and prints both loss
// curves: they agree within the rounding of the precision used.
//
//   mpirun -np 2 build/examples/train_tensor_parallel [--steps 200] [--precision bf16|fp16|fp32]
//
// In each block every rank holds 1/W of W1 (rows) and b1, 1/W of W2
// (columns), and the whole b2. A block's forward communicates once, in g;
// its backward once, in f, which sums the ranks' shares of the gradient of
// the block's input (each rank has only its own columns' share), so the
// second block hands the first a whole gradient. Every rank computes the
// same loss and backpropagates all of it (Megatron's convention), and the
// replicated b2 gets its whole gradient on every rank.
//
// Exit: 0 when the curves agree, 1 when they do not, 2 for a bad option.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <mixgrad/distributed.hpp>
#include <mixgrad/mixgrad.hpp>

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace DF = mixgrad::distributed::functional;

namespace {

constexpr int64_t kBatch = 64, kIn = 16, kHidden = 48;  // 48: splits over 1, 2, 3, 4 or 6 ranks

struct Options {
  int steps = 200;
  std::string precision = "bf16";
  double lr = 0.05;
};

// W1 [H, D], b1 [H], W2 [D, H], b2 [D]: whole, or this rank's shards.
struct Block {
  mg::Tensor w1, b1, w2, b2;
  std::vector<mg::Tensor> all() const { return {w1, b1, w2, b2}; }
};

using Model = std::vector<Block>;  // two blocks, one after the other

Model initial_model() {
  mg::manual_seed(0);
  Model m;
  for (int b = 0; b < 2; ++b)
    m.push_back({mg::normal({kHidden, kIn}, 0.0, 1.0 / std::sqrt(double(kIn))), mg::zeros({kHidden}),
                 mg::normal({kIn, kHidden}, 0.0, 1.0 / std::sqrt(double(kHidden))), mg::zeros({kIn})});
  return m;
}

std::vector<mg::Tensor> parameters(const Model& m) {
  std::vector<mg::Tensor> ps;
  for (const Block& b : m)
    for (const mg::Tensor& p : b.all()) ps.push_back(p);
  return ps;
}

// Rank r's shard: rows r/W of W1 and b1, columns r/W of W2, all of b2.
Model shard(const Model& whole, int rank, int world) {
  const int64_t n = kHidden / world;
  Model m;
  for (const Block& b : whole)
    m.push_back({F::narrow(b.w1, 0, rank * n, n).clone(), F::narrow(b.b1, 0, rank * n, n).clone(),
                 F::narrow(b.w2, 1, rank * n, n).clone(), b.b2.clone()});
  return m;
}

// Step s's batch, the same on every rank: x ~ N(0, 1), y = sin(x A).
std::pair<mg::Tensor, mg::Tensor> batch(int step) {
  mg::manual_seed(7);
  const mg::Tensor a = mg::normal({kIn, kIn}, 0.0, 1.0 / std::sqrt(double(kIn)));
  mg::manual_seed(1000 + static_cast<uint64_t>(step));
  const mg::Tensor x = mg::normal({kBatch, kIn});
  return {x, F::sin(F::matmul(x, a))};
}

// A block: column-parallel Linear, GELU, row-parallel Linear. With a
// group, `partial` is this rank's share of the second product.
mg::Tensor forward(const Block& p, const mg::Tensor& x, const mg::distributed::ProcessGroup* group) {
  const mg::Tensor in = group ? DF::copy_to_parallel_region(*group, x) : x;  // f
  const mg::Tensor h = F::gelu(F::linear(in, p.w1, p.b1));                      // [B, H / W]: this rank's columns
  const mg::Tensor partial = F::linear(h, p.w2);                                // [B, D]: a partial sum over H
  const mg::Tensor out = group ? DF::reduce_from_parallel_region(*group, partial) : partial;  // g
  return F::add(out, p.b2);
}

// The blocks one after the other, each with a residual connection.
mg::Tensor forward(const Model& m, const mg::Tensor& x, const mg::distributed::ProcessGroup* group) {
  mg::Tensor h = x;
  for (const Block& b : m) h = F::add(h, forward(b, h, group));
  return h;
}

// Trains `p` (in place) and returns the loss of every step.
std::vector<double> train(const Model& p, const Options& o, const mg::distributed::ProcessGroup* group) {
  const bool amp = o.precision != "fp32";
  const mg::DType low = o.precision == "fp16" ? mg::DType::float16 : mg::DType::bfloat16;
  mg::autodiff::GradManager gm;
  gm.attach(parameters(p));
  mg::optim::SGD opt(parameters(p), {.lr = o.lr, .momentum = 0.9});
  mg::amp::GradScaler scaler({.enabled = amp});
  if (group) mg::distributed::sync_grad_scaler(*group, scaler);  // one found-inf flag for every shard
  std::vector<double> losses;
  for (int step = 0; step < o.steps; ++step) {
    const auto [x, y] = batch(step);
    {
      mg::amp::autocast ac(amp, low);
      auto recording = gm.record();
      const mg::Tensor loss = F::mse_loss(forward(p, x, group), y);
      losses.push_back(loss.item<float>());
      scaler.backward(gm, loss);
    }
    opt.step().clear_grad();
  }
  return losses;
}

// The largest difference between the curves, relative to the loss.
double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return worst;
}

bool parse(int argc, char** argv, Options& o) {
  namespace po = boost::program_options;
  po::options_description desc("train_tensor_parallel (run under mpirun -np W)");
  desc.add_options()("help", "this help")("steps", po::value(&o.steps)->default_value(o.steps), "training steps")(
      "precision", po::value(&o.precision)->default_value(o.precision), "bf16, fp16 (autocast + GradScaler) or fp32")(
      "lr", po::value(&o.lr)->default_value(o.lr), "SGD learning rate (momentum 0.9)");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc;
    std::exit(0);
  }
  if (o.steps < 1 || (o.precision != "bf16" && o.precision != "fp16" && o.precision != "fp32"))
    throw po::error("--steps takes a positive number, --precision bf16, fp16 or fp32");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    parse(argc, argv, o);
  } catch (const std::exception& e) {
    std::cerr << "train_tensor_parallel: " << e.what() << "\n";
    return 2;
  }
  auto group = mg::distributed::init_process_group();
  const int rank = group.rank(), world = group.world_size();
  if (kHidden % world != 0) {
    std::cerr << "train_tensor_parallel: the hidden size " << kHidden << " does not split over " << world << " ranks\n";
    return 2;
  }
  const std::vector<double> parallel = train(shard(initial_model(), rank, world), o, &group);
  if (rank != 0) return 0;
  const std::vector<double> alone = train(initial_model(), o, nullptr);
  std::printf("step  loss (%d ranks)  loss (1 process)\n", world);
  for (int s = 0; s < o.steps; s += std::max(1, o.steps / 10))
    std::printf("%4d  %15.6f  %16.6f\n", s, parallel[s], alone[s]);
  const double worst = max_relative_difference(parallel, alone);
  // Float32 agrees to its rounding; 16-bit products round the two ranks'
  // partial sums separately, which the curves show as a small drift.
  const double tolerance = o.precision == "fp32" ? 1e-5 : 1e-2;
  std::printf("done: %d steps, loss %.6f -> %.6f; largest relative difference %.2e (tolerance %.0e)\n", o.steps,
              parallel.front(), parallel.back(), worst, tolerance);
  return worst <= tolerance && parallel.back() < parallel.front() ? 0 : 1;
}
