// Data-parallel training equals single-process training: W ranks with
// batch 128 / W each end with the parameters of one process with batch 128
// after N SGD steps (fp32 within rounding; with gradient accumulation; with
// AMP and a GradScaler within low-precision rounding). The single-process
// reference is computed on every rank, without any communication.
#include <cmath>
#include <vector>

#include "../common/test_util.hpp"
#include "dist_util.hpp"

namespace mg = mixgrad;
namespace dist = mixgrad::distributed;
namespace F = mixgrad::F;
using dist_test::world;
using test_util::values;

namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 128;  // rows per step in the data

// The global batch: 128, or the largest multiple of 4 x world_size below it,
// so every rank's share splits into 1, 2 or 4 micro-batches (mpirun -np 3
// runs the suite too).
int64_t global_batch() {
  const int64_t unit = 4 * world().world_size();
  return kBatch / unit * unit;
}

struct Data {
  mg::Tensor x, y;
};

const Data& data() {
  static const Data d = [] {
    mg::manual_seed(42);
    Data out;
    out.x = mg::normal({kSteps * kBatch, 20});
    std::vector<int64_t> labels(kSteps * kBatch);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7) % 5);
    out.y = mg::tensor(labels, mg::Shape{kSteps * kBatch});
    return out;
  }();
  return d;
}

struct Setup {
  bool distributed = false;
  int accumulate = 1;
  bool amp = false;
  int64_t bucket_bytes = dist::kDefaultBucketBytes;
};

struct Result {
  std::vector<double> params;
  double scale = 1.0;
  int buckets = 0;
};

Result train(const Setup& s) {
  const int W = s.distributed ? world().world_size() : 1;
  const int r = s.distributed ? world().rank() : 0;
  mg::manual_seed(1);
  auto net = mg::nn::Sequential(mg::nn::Linear(20, 32), mg::nn::ReLU(), mg::nn::Linear(32, 5));
  const auto params = net.parameters();
  mg::autodiff::GradManager gm;
  std::unique_ptr<dist::GradReducer> reducer;
  if (s.distributed) {
    // Rank 0's start everywhere (already equal here: the same seed).
    dist::broadcast_parameters(world(), net);
    reducer = std::make_unique<dist::GradReducer>(world(), "mean", dist::ReducerOptions{.bucket_bytes = s.bucket_bytes});
    reducer->attach(gm, params);
  } else {
    gm.attach(params);
  }
  mg::optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  mg::amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2, .enabled = s.amp});
  if (s.distributed) dist::sync_grad_scaler(world(), scaler);
  const int64_t per_rank = global_batch() / W, micro = per_rank / s.accumulate;
  for (int step = 0; step < kSteps; ++step) {
    for (int k = 0; k < s.accumulate; ++k) {
      const int64_t start = step * kBatch + r * per_rank + k * micro;
      mg::amp::autocast scope(s.amp);
      auto rec = gm.record();
      auto loss = F::cross_entropy(net(data().x.narrow(0, start, micro)), data().y.narrow(0, start, micro)) *
                  (1.0 / s.accumulate);
      scaler.backward(gm, loss, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
    }
    scaler.step(opt);
    scaler.update();
    opt.clear_grad();
  }
  Result out;
  for (const auto& p : params)
    for (double v : values(p)) out.params.push_back(v);
  out.scale = scaler.scale_factor();
  out.buckets = reducer ? reducer->num_buckets() : 0;
  return out;
}

void check_close(const Result& got, const Result& want, double tol) {
  BOOST_TEST_REQUIRE(got.params.size() == want.params.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.params.size(); ++i)
    worst = std::max(worst, std::abs(got.params[i] - want.params[i]) / (1.0 + std::abs(want.params[i])));
  BOOST_TEST_MESSAGE("largest relative parameter difference " << worst);
  BOOST_TEST(worst <= tol);
  BOOST_TEST(got.scale == want.scale);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(data_parallel)

BOOST_AUTO_TEST_CASE(ranks_times_batch_equal_one_process_fp32) {
  const Result ref = train({});
  const Result got = train({.distributed = true});
  check_close(got, ref, 2e-6);
  // The steps moved the parameters (a test of nothing would pass above too).
  mg::manual_seed(1);
  const auto init = values(mg::nn::Linear(20, 32).weight());
  double moved = 0.0;
  for (size_t i = 0; i < init.size(); ++i) moved = std::max(moved, std::abs(init[i] - ref.params[i]));
  BOOST_TEST(moved > 1e-3);
}

BOOST_AUTO_TEST_CASE(gradient_accumulation_fp32) {
  const Result ref = train({});
  check_close(train({.distributed = true, .accumulate = 2}), ref, 2e-6);
  check_close(train({.distributed = true, .accumulate = 4}), ref, 2e-6);
}

BOOST_AUTO_TEST_CASE(bucket_boundaries_split_tensors) {
  // 256-byte buckets hold 64 floats: the 837 gradient elements (5 + 160 +
  // 32 + 640, packed in the order they become ready) fill ceil(837 / 64) =
  // 14 buckets, and most tensors straddle a boundary.
  const Result ref = train({});
  const Result got = train({.distributed = true, .accumulate = 2, .bucket_bytes = 256});
  BOOST_TEST(got.buckets == 14);
  check_close(got, ref, 2e-6);
}

BOOST_AUTO_TEST_CASE(amp_with_grad_scaler) {
  const Result ref = train({.amp = true});
  const Result got = train({.distributed = true, .amp = true});
  BOOST_TEST(ref.scale > 1024.0);  // clean steps grew the scale, identically
  check_close(got, ref, 2e-3);
  check_close(train({.distributed = true, .accumulate = 2, .amp = true}), ref, 2e-3);
}

BOOST_AUTO_TEST_SUITE_END()
