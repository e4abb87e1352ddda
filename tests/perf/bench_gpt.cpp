// The character-level GPT's training step, mixgrad against LibTorch in the
// same process: examples/train_char_gpt's model (mixgrad) and the same
// architecture in torch::nn (gpt_libtorch.cpp), the same tokens, forward +
// cross-entropy + backward + gradient clipping + AdamW, fp32 and bf16
// autocast. Prints a table of tokens/s and the command.
//
//   build/tests/perf/bench_gpt [--rounds 5] [--reps 3] [--threads 2]
//                              [--side mixgrad|LibTorch] [--precision fp32|bf16]
//
// --side runs one library alone and --precision one precision (to profile
// them); the ratio column needs both sides.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_gpt_sides.hpp"
#include "bench_harness.hpp"
#include "cpu_line.hpp"
#include "mixgrad/mixgrad.hpp"
#include "train_char_gpt/model.hpp"

namespace perf::gpt {

namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;

class MixgradGpt final : public Runner {
 public:
  MixgradGpt(const Config& c, const int64_t* tokens)
      : c_(c),
        net_({.vocab = c.vocab, .block = c.block, .layers = c.layers, .heads = c.heads, .embd = c.embd}),
        params_(net_.parameters()),
        opt_(params_, {.lr = 1e-3, .weight_decay = 0.1}) {
    std::vector<int64_t> x, y;
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t* row = tokens + b * (c.block + 1);
      x.insert(x.end(), row, row + c.block);
      y.insert(y.end(), row + 1, row + c.block + 1);
    }
    x_ = mg::tensor<int64_t>(x, {c.batch, c.block});
    y_ = mg::tensor<int64_t>(y, {c.batch * c.block});
    gm_.attach(params_);
  }
  void run() override {
    mg::Tensor loss;
    {
      mg::amp::autocast ac(c_.bf16, mg::DType::bfloat16);
      auto rec = gm_.record();
      loss = F::cross_entropy(F::reshape(net_(x_), {-1, c_.vocab}), y_);
      gm_.backward(loss);
    }
    mg::optim::clip_grad_norm(params_, 1.0);
    opt_.step().clear_grad();
    value_ = loss.item<double>();
  }
  double value() const override { return value_; }

 private:
  Config c_;
  ::gpt::CharGPT net_;
  std::vector<mg::Tensor> params_;
  mg::optim::AdamW opt_;
  mg::autodiff::GradManager gm_;
  mg::Tensor x_, y_;
  double value_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_mixgrad(const Config& c, const int64_t* tokens) {
  return std::make_unique<MixgradGpt>(c, tokens);
}

}  // namespace perf::gpt

int main(int argc, char** argv) {
  using namespace perf;
  print_cpu_line();
  keep_freed_memory();
  TimingOptions timing{.warmup = 3, .rounds = 5, .reps = 3};
  int threads = 2;
  std::string side, precision;  // empty: both
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = i + 1 < argc ? argv[i + 1] : "";
    const int count = std::atoi(v.c_str());  // 0 for a value that is not a positive number
    if (k == "--rounds" && count > 0) timing.rounds = count;
    else if (k == "--reps" && count > 0) timing.reps = count;
    else if (k == "--threads" && count > 0) threads = count;
    else if (k == "--side" && (v == "mixgrad" || v == "LibTorch")) side = v;
    else if (k == "--precision" && (v == "fp32" || v == "bf16")) precision = v;
    else {
      std::fprintf(stderr,
                   "bench_gpt: bad option %s %s\nusage: bench_gpt [--rounds N] [--reps N] [--threads N] "
                   "[--side mixgrad|LibTorch] [--precision fp32|bf16]\n",
                   k.c_str(), v.c_str());
      return 2;
    }
  }
  mixgrad::set_num_threads(threads);
#if MIXGRAD_BENCH_LIBTORCH
  libtorch_side::set_threads(threads);
  std::printf("LibTorch %s\n", libtorch_side::version());
#endif
  std::printf("command: bench_gpt --rounds %d --reps %d --threads %d%s%s%s%s\n\n", timing.rounds, timing.reps, threads,
              side.empty() ? "" : " --side ", side.c_str(), precision.empty() ? "" : " --precision ",
              precision.c_str());
  const bool run_mine = side != "LibTorch";
  Table t({"model", "precision", "mixgrad ms/step", "mixgrad tok/s", "LibTorch ms/step", "LibTorch tok/s",
           "mixgrad / LibTorch"});
  for (bool bf16 : {false, true}) {
    if (!precision.empty() && (precision == "bf16") != bf16) continue;
    const perf::gpt::Config c{.bf16 = bf16};
    std::mt19937_64 rng(7);
    std::vector<int64_t> tokens(static_cast<size_t>(c.batch * (c.block + 1)));
    for (auto& tk : tokens) tk = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.vocab));
    std::vector<std::function<void()>> contenders;
    std::unique_ptr<perf::Runner> mine, theirs;
    if (run_mine) {
      mine = perf::gpt::make_mixgrad(c, tokens.data());
      contenders.push_back([&] { mine->run(); });
    }
#if MIXGRAD_BENCH_LIBTORCH
    if (side != "mixgrad") {
      theirs = perf::gpt::make_libtorch(c, tokens.data());
      contenders.push_back([&] { theirs->run(); });
    }
#endif
    if (contenders.empty()) {
      std::fprintf(stderr, "bench_gpt: this build has no LibTorch side\n");
      return 2;
    }
    const auto st = alternate(contenders, timing);
    const double tok = static_cast<double>(c.batch * c.block);
    std::vector<std::string> row = {"4 x 128, 4 heads, context 64, batch 32", bf16 ? "bf16 autocast" : "fp32"};
    const auto cells = [&](const Stat* s) {
      row.push_back(s ? fixed(s->median, 1) : "-");
      row.push_back(s ? fixed(tok / (s->median * 1e-3), 0) : "-");
    };
    const Stat* mine_st = mine ? &st[0] : nullptr;
    const Stat* theirs_st = theirs ? &st[contenders.size() - 1] : nullptr;
    cells(mine_st);
    cells(theirs_st);
    row.push_back(mine_st && theirs_st ? fixed(mine_st->median / theirs_st->median, 2) : "-");
    t.row(row);
  }
  t.print();
  return 0;
}
