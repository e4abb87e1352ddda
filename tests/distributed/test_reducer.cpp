// The gradient reducer's edge cases: a tensor without a gradient on some
// ranks, ranks whose first backward disagrees, a user's callback that
// throws mid-backward, and the GradScaler's
// found-inf flag agreed across ranks; its overlap: buckets start while
// backward runs, and the bucket size changes no result.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "../common/test_util.hpp"
#include "dist_util.hpp"

namespace mg = mixgrad;
namespace dist = mixgrad::distributed;
using dist_test::world;
using test_util::values;

namespace {

mg::Tensor param(std::vector<float> v) {
  return mg::tensor(v, mg::Shape{static_cast<int64_t>(v.size())});
}

// loss = sum(a * c_r) (+ sum(b * d) where use_b), c_r = (r + 1) * [1, 2, 3], d = [4, 5, 6].
void backward(mg::autodiff::GradManager& gm, const mg::Tensor& a, const mg::Tensor& b, bool use_b) {
  const float k = static_cast<float>(world().rank() + 1);
  auto rec = gm.record();
  mg::Tensor loss = mg::F::sum(a * param({k, 2 * k, 3 * k}));
  if (use_b) loss = loss + mg::F::sum(b * param({4, 5, 6}));
  gm.backward(loss);
}

struct MlpRun {
  std::vector<dist::BucketEvent> events;
  int buckets = 0;
  std::vector<double> first_ready;  // per backward: when the first layer's weight gradient was final
  std::vector<double> grads;        // every parameter's .grad(), concatenated
};

// `backwards` backward passes (gradients accumulated) of 32-width-width-8
// Linear + ReLU layers on rank-dependent data, reduced in buckets of
// `bucket_bytes`, with the reducer's timeline.
MlpRun run_mlp(int64_t bucket_bytes, int64_t width, int backwards) {
  mg::manual_seed(3);
  auto net = mg::nn::Sequential(mg::nn::Linear(32, width), mg::nn::ReLU(), mg::nn::Linear(width, width),
                                mg::nn::ReLU(), mg::nn::Linear(width, 8));
  const auto params = net.parameters();
  mg::autodiff::GradManager gm;
  dist::GradReducer reducer(world(), "mean", {.bucket_bytes = bucket_bytes});
  MlpRun out;
  // Attached first, so it runs before the reducer's callback on that gradient.
  gm.attach(params[0], {[&](const mg::Tensor&, const mg::Tensor& g) {
    out.first_ready.push_back(reducer.now());
    return g;
  }});
  reducer.attach(gm, params);
  reducer.record_timeline(true);
  mg::manual_seed(10 + static_cast<uint64_t>(world().rank()));
  const mg::Tensor x = mg::normal({16, 32});
  for (int k = 0; k < backwards; ++k) {
    auto rec = gm.record();
    const mg::Tensor y = net(x);
    gm.backward(mg::F::sum(y * y));
  }
  out.events = reducer.timeline();
  out.buckets = reducer.num_buckets();
  for (const auto& p : params)
    for (double v : values(p.grad())) out.grads.push_back(v);
  return out;
}

// The first backward lays the buckets out and starts them all in its
// after-backward hook; in every later one the first bucket (the last
// layers' gradients) starts before the first layer's gradient is final,
// and so while backward still computes; buckets start in order.
void check_overlap(const MlpRun& run, int backwards) {
  const size_t B = static_cast<size_t>(run.buckets);
  BOOST_TEST_REQUIRE(run.events.size() == backwards * B);
  BOOST_TEST_REQUIRE(run.first_ready.size() == static_cast<size_t>(backwards));
  for (size_t b = 0; b < B; ++b) BOOST_TEST(run.events[b].start >= run.events[b].backward_end);
  for (size_t k = 1; k < static_cast<size_t>(backwards); ++k) {
    const dist::BucketEvent* e = &run.events[k * B];
    BOOST_TEST(e[0].start < run.first_ready[k], "backward " << k + 1 << ": bucket 0 started at " << e[0].start
                                                            << " s, the first layer's gradient was final at "
                                                            << run.first_ready[k] << " s");
    for (size_t b = 1; b < B; ++b) BOOST_TEST(e[b].start >= e[b - 1].start);
  }
}

// An identity whose backward takes `ms` milliseconds: one long op, as a
// convolution's backward is, inside which nothing calls MPI.
struct SlowIdentity : mg::autodiff::Function {
  int ms;
  explicit SlowIdentity(int m) : ms(m) {}
  std::string name() const override { return "SlowIdentity"; }
  std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override { return {in[0].clone()}; }
  std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return {dy[0]};
  }
};

// Linear(8, 256) -> SlowIdentity -> Linear(256, 1024) in 1 MiB buckets:
// bucket 0 (the last layer's 1 MiB weight) starts before the slow op.
// Returns, per backward after the first, whether the reducer saw bucket 0
// finished before backward ended.
std::vector<bool> bucket0_done_during_backward(int64_t progress_thread_us) {
  mg::manual_seed(5);
  mg::nn::Linear first(8, 256), last(256, 1024);
  mg::autodiff::GradManager gm;
  dist::GradReducer reducer(world(), "sum", {.bucket_bytes = 1 << 20, .progress_thread_us = progress_thread_us});
  reducer.attach(gm, {first.weight(), first.bias(), last.weight(), last.bias()});
  reducer.record_timeline(true);
  const mg::Tensor x = mg::normal({4, 8});
  for (int k = 0; k < 3; ++k) {
    world().barrier();  // the ranks enter backward together
    auto rec = gm.record();
    const mg::Tensor h = mg::autodiff::apply(std::make_shared<SlowIdentity>(100), {first(x)})[0];
    gm.backward(mg::F::sum(last(h)));
  }
  const size_t B = static_cast<size_t>(reducer.num_buckets());
  std::vector<bool> out;
  for (size_t k = 1; k < 3; ++k) {
    const dist::BucketEvent& e = reducer.timeline()[k * B];
    out.push_back(e.finish < e.backward_end);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reducer)

BOOST_AUTO_TEST_CASE(the_progress_thread_moves_a_bucket_during_a_long_op) {
  int level = 0;
  MPI_Query_thread(&level);
  if (world().world_size() < 2 || level != MPI_THREAD_MULTIPLE) return;  // no thread without MULTIPLE
  // The thread moves bucket 0's data during the 100 ms op; the reducer sees
  // it done at the next op, well before backward ends (twice in a row:
  // a rank descheduled for 100 ms misses once, not twice).
  const std::vector<bool> done = bucket0_done_during_backward(dist::ReducerOptions{}.progress_thread_us);
  BOOST_TEST((done[0] || done[1]));
}

BOOST_AUTO_TEST_CASE(small_buckets_start_during_backward) {
  // 27,168 bytes of float32 gradients (8 KiB, 16 KiB and 2 KiB weights and
  // their biases) fill ceil(27168 / 4096) = 7 buckets of 4 KiB.
  const MlpRun run = run_mlp(4 << 10, 64, 3);
  BOOST_TEST(run.buckets == 7);
  check_overlap(run, 3);
}

BOOST_AUTO_TEST_CASE(the_default_buckets_start_a_model_of_a_few_mib_during_backward) {
  // 1.1 MiB of gradients (the 512 x 512 weight alone is 1 MiB): more than
  // one bucket by default, the first started before backward ends.
  const MlpRun run = run_mlp(dist::kDefaultBucketBytes, 512, 2);
  BOOST_TEST(run.buckets > 1);
  check_overlap(run, 2);
}

BOOST_AUTO_TEST_CASE(bucket_size_changes_no_result) {
  // On two ranks a sum of two floats does not depend on how the buckets
  // cut the gradients: bit-identical. More ranks may add in an order that
  // depends on the message size (Open MPI picks its algorithm by size).
  const MlpRun ref = run_mlp(25 << 20, 64, 2);
  BOOST_TEST(ref.buckets == 1);
  for (int64_t bytes : {int64_t{12}, int64_t{1000}, int64_t{16} << 10, dist::kDefaultBucketBytes}) {
    const MlpRun got = run_mlp(bytes, 64, 2);
    BOOST_TEST_REQUIRE(got.grads.size() == ref.grads.size());
    if (world().world_size() <= 2) {
      BOOST_TEST(got.grads == ref.grads, boost::test_tools::per_element());
    } else {
      for (size_t i = 0; i < ref.grads.size(); ++i)
        BOOST_TEST(got.grads[i] == ref.grads[i], boost::test_tools::tolerance(1e-5));
    }
  }
}

BOOST_AUTO_TEST_CASE(tensor_without_gradient_on_some_ranks) {
  const int W = world().world_size();
  const double tri = W * (W + 1) / 2.0;
  mg::Tensor a = param({0, 0, 0}), b = param({0, 0, 0});
  mg::autodiff::GradManager gm;
  gm.attach({a, b}, {dist::make_allreduce_callback(gm, world(), "sum", {.bucket_bytes = 8})});
  backward(gm, a, b, true);  // the first backward lays the buckets out: every rank reaches both
  BOOST_TEST(values(a.grad()) == std::vector<double>({tri, 2 * tri, 3 * tri}), boost::test_tools::per_element());
  BOOST_TEST(values(b.grad()) == std::vector<double>({4.0 * W, 5.0 * W, 6.0 * W}), boost::test_tools::per_element());
  a.set_grad(mg::Tensor());
  b.set_grad(mg::Tensor());
  for (int round = 0; round < 2; ++round) {
    // Only rank 0 reaches b: the others contribute zeros and still get the sum.
    backward(gm, a, b, world().rank() == 0);
    BOOST_TEST(values(a.grad()) == std::vector<double>({tri, 2 * tri, 3 * tri}), boost::test_tools::per_element());
    BOOST_TEST_REQUIRE(b.grad().defined());
    BOOST_TEST(values(b.grad()) == std::vector<double>({4, 5, 6}), boost::test_tools::per_element());
    a.set_grad(mg::Tensor());
    b.set_grad(mg::Tensor());
  }
}

// A user's gradient callback throws after the reducer started buckets: the
// next backward cannot know which buckets the other ranks started, so it
// refuses on every rank, naming the rank, instead of reducing half-stale
// buckets (before, it handed out this rank's unreduced gradient); nothing
// hangs, and every later backward refuses too.
BOOST_AUTO_TEST_CASE(a_throwing_user_callback_is_refused_cleanly_by_the_next_backward) {
  mg::Tensor a = param({0, 0, 0}), b = param({0, 0, 0});
  mg::autodiff::GradManager gm;
  gm.attach({a, b}, {dist::make_allreduce_callback(gm, world(), "sum", {.bucket_bytes = 8})});
  bool fail = false;
  gm.attach(a, {[&](const mg::Tensor&, const mg::Tensor& g) {
              if (fail) throw mg::ValueError("the user's callback failed");
              return g;
            }});
  backward(gm, a, b, true);  // lays the buckets out
  a.set_grad(mg::Tensor());
  b.set_grad(mg::Tensor());
  fail = true;
  test_util::check_error<mg::ValueError>([&] { backward(gm, a, b, true); }, {"the user's callback failed"});
  fail = false;
  const std::string rank = std::string("rank ").append(std::to_string(world().rank()));
  test_util::check_error<mg::StateError>([&] { backward(gm, a, b, true); },
                                         {rank, "the previous backward ended before the reducer's after-backward"});
  BOOST_TEST(!a.grad().defined());
  test_util::check_error<mg::StateError>([&] { backward(gm, a, b, true); }, {rank, "an earlier backward failed"});
  world().barrier();  // every rank got here: nothing waits for a bucket
}

BOOST_AUTO_TEST_CASE(first_backward_must_agree) {
  if (world().world_size() < 2) return;
  mg::Tensor a = param({0, 0, 0}), b = param({0, 0, 0});
  mg::autodiff::GradManager gm;
  gm.attach({a, b}, {dist::make_allreduce_callback(gm, world(), "mean")});
  // Rank 0 reaches two tensors, the others one: every rank refuses, none hangs.
  test_util::check_error<mg::StateError>([&] { backward(gm, a, b, world().rank() == 0); },
                                         {"GradReducer", "first backward"});
  BOOST_TEST(!a.grad().defined());  // backward changed no .grad()
  BOOST_TEST(!b.grad().defined());
}

BOOST_AUTO_TEST_CASE(found_inf_agrees_across_ranks) {
  const int W = world().world_size();
  mg::Tensor a = param({1, 1, 1}), b = param({1, 1, 1});
  mg::autodiff::GradManager gm;
  gm.attach({a, b}, {dist::make_allreduce_callback(gm, world(), "mean")});
  mg::optim::SGD opt({a, b}, {.lr = 0.5});
  mg::amp::GradScaler scaler({.init_scale = 8.0, .growth_interval = 1});
  dist::sync_grad_scaler(world(), scaler);

  // Step 1: the last rank's reduced gradient overflows after the reduction
  // (as a local unscale can): only it sees inf, yet every rank must skip.
  {
    auto rec = gm.record();
    scaler.backward(gm, mg::F::sum(a * 2.0) + mg::F::sum(b), {},
        {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
  }
  if (world().rank() == W - 1) a.grad().data<float>()[1] = std::numeric_limits<float>::infinity();
  scaler.step(opt);
  scaler.update();
  BOOST_TEST(scaler.found_non_finite());
  BOOST_TEST(values(a) == std::vector<double>({1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(values(b) == std::vector<double>({1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(scaler.scale_factor() == 4.0);
  opt.clear_grad();

  // Step 2: clean everywhere: every rank steps and grows the scale alike.
  {
    auto rec = gm.record();
    scaler.backward(gm, mg::F::sum(a * 2.0) + mg::F::sum(b));  // unscale + update inside
  }
  scaler.step(opt);
  BOOST_TEST(!scaler.found_non_finite());
  BOOST_TEST(values(a) == std::vector<double>({0, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(values(b) == std::vector<double>({0.5, 0.5, 0.5}), boost::test_tools::per_element());
  BOOST_TEST(scaler.scale_factor() == 8.0);
  // The scales, gathered: identical on every rank.
  const auto scales = dist::all_gather(world(), mg::scalar(scaler.scale_factor(), mg::DType::float64));
  for (double s : values(scales)) BOOST_TEST(s == 8.0);
}

BOOST_AUTO_TEST_CASE(reducer_options_are_checked) {
  test_util::check_error<mg::ValueError>([] { dist::GradReducer(world(), "max"); }, {"mean", "sum"});
  test_util::check_error<mg::ValueError>([] { dist::GradReducer(world(), "mean", {.bucket_bytes = 0}); },
                                         {"bucket_bytes"});
  test_util::check_error<mg::ValueError>([] { dist::GradReducer(world(), "mean", {.progress_thread_us = -1}); },
                                         {"progress_thread_us", "-1"});
}

BOOST_AUTO_TEST_SUITE_END()
