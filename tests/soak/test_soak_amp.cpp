// Soak test: thousands of mixed-precision training steps on a small MLP
// with a GradScaler, overflows injected at seeded random steps, including
// runs of hundreds of non-finite losses in a row. Checked at every step:
// the scale stays in its range, no parameter becomes inf or NaN, and a step
// is skipped exactly when an overflow was injected (so clean steps are
// taken again right after a run). Checked per phase: resident memory does
// not grow after warm-up, and the scale grows back once the injections stop.
//
// Three phases split the steps: bfloat16 autocast with the default floor
// (min_scale 2^-14), float16 autocast with the default floor, and bfloat16
// without a min_scale (the scale's own limit, 2^-126, is the floor).
//
//   build/tests/test_soak                        # the full length, ~2 minutes alone on 2 cores
//   build/tests/test_soak -- --steps 3000 --seed 7
//   MIXGRAD_SOAK_STEPS=3000 meson test -C build --suite soak
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using mg::DType;

namespace {

// Sanitizer builds run a tenth of the steps and skip the memory check:
// AddressSanitizer's quarantine holds freed blocks back on purpose, so
// resident memory grows there without a leak (LeakSanitizer finds leaks).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// About 2 minutes alone on 2 cores (~1.9 ms of CPU time per step).
constexpr int64_t kDefaultSteps = kSanitized ? 6000 : 60000;
constexpr uint64_t kDefaultSeed = 2024;

// A leak of one batch-sized activation per step (256 x 256 floats, 256 KiB)
// would add gigabytes in a phase of the default length, and even one
// 1 KiB block per step several MiB; what a
// leak-free run may still add after warm-up is allocator slack: glibc keeps
// freed chunks in its arenas and trims only above M_TRIM_THRESHOLD (128 KiB
// by default, adjusted upwards as larger blocks are freed), and OpenMP /
// oneDNN may touch a few more pages of their thread stacks and scratchpads.
// 4 MiB covers that with room, and is still small against any per-step leak
// over thousands of steps.
constexpr double kRssToleranceMiB = 4.0;

struct Config {
  int64_t steps = kDefaultSteps;
  uint64_t seed = kDefaultSeed;
};

// `-- --steps N --seed S` after Boost.Test's own arguments, or the
// environment (MIXGRAD_SOAK_STEPS, MIXGRAD_SOAK_SEED); arguments win.
Config read_config() {
  Config c;
  if (const char* s = std::getenv("MIXGRAD_SOAK_STEPS")) c.steps = std::atoll(s);
  if (const char* s = std::getenv("MIXGRAD_SOAK_SEED")) c.seed = std::strtoull(s, nullptr, 10);
  auto& suite = boost::unit_test::framework::master_test_suite();
  for (int i = 1; i + 1 < suite.argc; ++i) {
    if (std::strcmp(suite.argv[i], "--steps") == 0) c.steps = std::atoll(suite.argv[++i]);
    else if (std::strcmp(suite.argv[i], "--seed") == 0) c.seed = std::strtoull(suite.argv[++i], nullptr, 10);
  }
  return c;
}

double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

enum class Injection { none, nan_loss, inf_loss, nan_input };

struct PhaseSpec {
  const char* name;
  DType low;
  std::optional<double> min_scale;
  double max_scale;  // keeps natural overflows out, so every skip is an injected one
};

struct PhaseResult {
  int64_t steps = 0, injected = 0, skipped = 0, longest_run = 0;
  double scale_min = std::numeric_limits<double>::infinity(), scale_max = 0.0;
  double rss_start = 0.0, rss_end = 0.0, rss_peak = 0.0;
  double first_loss = 0.0, last_loss = 0.0;
};

// Which steps of a phase get an overflow: single ones at random (3 %), and
// long runs of 150 to 400 (one per 2,500 steps, at least two), the last one
// ending where the clean recovery tail begins.
std::vector<Injection> plan_injections(int64_t steps, int64_t warmup, int64_t recovery, std::mt19937_64& rng) {
  std::vector<Injection> plan(steps, Injection::none);
  std::uniform_int_distribution<int> kind(1, 3);
  auto pick = [&] { return static_cast<Injection>(kind(rng)); };
  const int64_t middle_end = steps - recovery;
  std::bernoulli_distribution single(0.03);
  for (int64_t i = warmup; i < middle_end; ++i)
    if (single(rng)) plan[i] = pick();
  const int64_t middle = middle_end - warmup;
  auto run_length = [&] {
    std::uniform_int_distribution<int64_t> len(150, 400);
    return std::max<int64_t>(1, std::min(len(rng), middle / 3));
  };
  // Each run starts somewhere in its own slot of the middle section; the
  // last slot's run is pushed to the slot's end.
  const int64_t runs = std::max<int64_t>(2, middle / 2500);
  const int64_t slot = middle / runs;
  for (int64_t k = 0; k < runs; ++k) {
    const int64_t len = std::min(run_length(), slot);
    const int64_t slot_begin = warmup + k * slot;
    int64_t at = middle_end - len;
    if (k + 1 < runs) at = std::uniform_int_distribution<int64_t>(slot_begin, slot_begin + slot - len)(rng);
    for (int64_t i = at; i < at + len; ++i) plan[i] = pick();
  }
  return plan;
}

bool all_finite(const std::vector<mg::Tensor>& params) {
  for (const mg::Tensor& p : params)
    for (float v : p.to_vector<float>())
      if (!std::isfinite(v)) return false;
  return true;
}

PhaseResult run_phase(const PhaseSpec& spec, int64_t steps, uint64_t seed) {
  constexpr int64_t kBatch = 256, kIn = 64, kHidden = 256, kClasses = 10, kSamples = 4096;
  constexpr int64_t kGrowthInterval = 25;
  mg::manual_seed(seed);
  auto net = mg::nn::Sequential(mg::nn::Linear(kIn, kHidden), mg::nn::ReLU(), mg::nn::Linear(kHidden, kHidden),
                                mg::nn::ReLU(), mg::nn::Linear(kHidden, kClasses));
  const mg::Tensor x = mg::normal({kSamples, kIn});
  const mg::Tensor labels = mg::F::argmax(mg::F::matmul(x, mg::normal({kIn, kClasses})), 1);
  std::vector<float> poisoned_values = x.narrow(0, 0, kBatch).to_vector<float>();
  poisoned_values[kIn + 3] = std::numeric_limits<float>::quiet_NaN();
  const mg::Tensor poisoned = mg::tensor(poisoned_values, {kBatch, kIn});

  const std::vector<mg::Tensor> params = net.parameters();
  mg::autodiff::GradManager gm;
  gm.attach(params);
  mg::optim::SGD opt(params, {.lr = 0.05, .momentum = 0.9});
  mg::amp::GradScaler scaler({.init_scale = 256.0,
                              .growth_interval = kGrowthInterval,
                              .min_scale = spec.min_scale,
                              .max_scale = spec.max_scale});
  const double floor = spec.min_scale.value_or(mg::amp::kMinScaleLimit);

  const int64_t warmup = std::min<int64_t>(300, steps / 10);
  const int64_t recovery = std::max<int64_t>(steps / 6, 4 * kGrowthInterval);
  std::mt19937_64 rng(seed);
  const std::vector<Injection> plan = plan_injections(steps, warmup, recovery, rng);

  PhaseResult r;
  r.steps = steps;
  int64_t run = 0, last_run = 0;
  double recovery_start_scale = 0.0;
  for (int64_t i = 0; i < steps; ++i) {
    if (i == warmup) r.rss_start = rss_mib();
    if (i == steps - recovery) {
      recovery_start_scale = scaler.scale_factor();
      last_run = run;
    }
    const Injection inj = plan[i];
    const int64_t b = (i * kBatch) % kSamples;
    {
      mg::amp::autocast scope(true, spec.low);
      auto rec = gm.record();
      const mg::Tensor input = inj == Injection::nan_input ? poisoned : x.narrow(0, b, kBatch);
      const mg::Tensor target = inj == Injection::nan_input ? labels.narrow(0, 0, kBatch) : labels.narrow(0, b, kBatch);
      mg::Tensor loss = mg::F::cross_entropy(net(input), target);
      if (inj == Injection::nan_loss) loss = mg::F::mul(loss, std::numeric_limits<double>::quiet_NaN());
      if (inj == Injection::inf_loss) loss = mg::F::mul(loss, std::numeric_limits<double>::infinity());
      if (inj == Injection::none) {
        r.last_loss = loss.item<double>();
        if (r.first_loss == 0.0) r.first_loss = r.last_loss;
      }
      scaler.backward(gm, loss);
    }
    const int64_t updates = opt.step_count(0);
    scaler.step(opt);  // skipped on the device when the step overflowed
    opt.clear_grad();
    const bool stepped = opt.step_count(0) == updates + 1;

    const bool injected = inj != Injection::none;
    r.injected += injected;
    r.skipped += !stepped;
    run = injected ? run + 1 : 0;
    r.longest_run = std::max(r.longest_run, run);
    BOOST_TEST_REQUIRE(stepped == !injected, spec.name << " step " << i << ": injected " << injected << " but stepped "
                                                       << stepped << " at scale " << scaler.scale_factor());
    const double s = scaler.scale_factor();
    r.scale_min = std::min(r.scale_min, s);
    r.scale_max = std::max(r.scale_max, s);
    BOOST_TEST_REQUIRE((s >= floor && s <= spec.max_scale), spec.name << " step " << i << ": scale " << s);
    BOOST_TEST_REQUIRE((s >= mg::amp::kMinScaleLimit && s <= mg::amp::kMaxScaleLimit));
    BOOST_TEST_REQUIRE(std::isnormal(static_cast<float>(s)));
    BOOST_TEST_REQUIRE(std::isnormal(static_cast<float>(1.0 / s)));
    BOOST_TEST_REQUIRE(all_finite(params), spec.name << " step " << i << ": a parameter is not finite");
    if (i >= warmup && i % 100 == 0) r.rss_peak = std::max(r.rss_peak, rss_mib());
  }
  r.rss_end = rss_mib();
  r.rss_peak = std::max(r.rss_peak, r.rss_end);

  BOOST_TEST(r.skipped == r.injected);
  // The tail is clean: the scale grows from wherever the last run left it,
  // one growth_factor per growth_interval steps, up to max_scale.
  const double expected_end =
      std::min(spec.max_scale, recovery_start_scale * std::ldexp(1.0, static_cast<int>(recovery / kGrowthInterval)));
  BOOST_TEST(scaler.scale_factor() == expected_end);
  BOOST_TEST(scaler.scale_factor() > recovery_start_scale);
  // Runs of hundreds reach the floor, and the scale stops there.
  const double backoffs_to_floor = std::log2(spec.max_scale / floor);
  if (static_cast<double>(r.longest_run) >= backoffs_to_floor) BOOST_TEST(r.scale_min == floor);
  if (static_cast<double>(last_run) >= backoffs_to_floor) BOOST_TEST(recovery_start_scale == floor);
  BOOST_TEST(std::isfinite(r.last_loss));
  if (kSanitized) {
    BOOST_TEST_MESSAGE("sanitizer build: resident memory not checked");
  } else {
    BOOST_TEST(r.rss_peak - r.rss_start <= kRssToleranceMiB,
               spec.name << ": resident memory grew from " << r.rss_start << " MiB to " << r.rss_peak << " MiB");
  }
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(grad_scaler_survives_thousands_of_steps_with_injected_overflows) {
  const Config config = read_config();
  BOOST_TEST_REQUIRE(config.steps >= 2000, "--steps must be at least 2000, got " << config.steps);
  const PhaseSpec phases[] = {
      {"bf16", DType::bfloat16, mg::amp::kDefaultMinScale, 0x1p24},
      {"fp16", DType::float16, mg::amp::kDefaultMinScale, 0x1p10},
      {"bf16-no-min-scale", DType::bfloat16, std::nullopt, 0x1p24},
  };
  const double share[] = {0.4, 0.4, 0.2};
  const auto t0 = std::chrono::steady_clock::now();
  int64_t total_steps = 0, total_injected = 0, total_skipped = 0;
  for (int p = 0; p < 3; ++p) {
    const int64_t steps = std::max<int64_t>(100, static_cast<int64_t>(share[p] * static_cast<double>(config.steps)));
    const PhaseResult r = run_phase(phases[p], steps, config.seed + static_cast<uint64_t>(p));
    std::printf(
        "soak %-17s steps %lld, injected %lld (longest run %lld), skipped %lld, scale min %.6g max %.6g, "
        "RSS start %.1f MiB end %.1f MiB peak %.1f MiB, loss %.4f -> %.4f\n",
        phases[p].name, static_cast<long long>(r.steps), static_cast<long long>(r.injected),
        static_cast<long long>(r.longest_run), static_cast<long long>(r.skipped), r.scale_min, r.scale_max,
        r.rss_start, r.rss_end, r.rss_peak, r.first_loss, r.last_loss);
    total_steps += r.steps;
    total_injected += r.injected;
    total_skipped += r.skipped;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("soak total steps %lld, injected %lld, skipped %lld, %.1f s (seed %llu)\n",
              static_cast<long long>(total_steps), static_cast<long long>(total_injected),
              static_cast<long long>(total_skipped), seconds, static_cast<unsigned long long>(config.seed));
  BOOST_TEST(total_skipped == total_injected);
}
