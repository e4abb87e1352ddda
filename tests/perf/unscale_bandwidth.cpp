// Benchmark: GradScaler::unscale (one fused multiply + inf/NaN check over
// all gradients, in place) against memcpy of the same bytes, in one run.
// Both read and write every gradient byte once, so memcpy is the bandwidth
// the unscale pass can hope for. Not a test: `meson test --benchmark`.
//
//   build/tests/unscale_bandwidth [total_elements] [tensors] [repeats]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "cpu_line.hpp"

namespace mg = mixgrad;

namespace {

template <class F>
double median_seconds(int repeats, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f(r);
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  perf::print_cpu_line();
  const int64_t total = argc > 1 ? std::atoll(argv[1]) : 25'000'000;
  const int64_t count = argc > 2 ? std::atoll(argv[2]) : 200;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 11;
  const int64_t per = total / count;
  const double bytes = static_cast<double>(per * count) * sizeof(float);

  std::vector<mg::Tensor> params;
  std::vector<std::vector<float>> copies(count);
  mg::manual_seed(1);
  for (int64_t i = 0; i < count; ++i) {
    mg::Tensor p = mg::zeros({per});
    p.set_grad(mg::uniform({per}, -1.0, 1.0));
    params.push_back(p);
    copies[i].assign(per, 0.f);  // touched: no page faults inside the timing
  }

  // The scale alternates 2 and 1/2 so values stay put (a multiply by a
  // non-trivial factor every time), with update(new_scale) between passes.
  mg::amp::GradScaler scaler(2.0);
  auto unscale = [&](int r) {
    scaler.unscale(params);
    scaler.update(r % 2 == 0 ? 0.5 : 2.0);
  };
  auto copy = [&](int) {
    for (int64_t i = 0; i < count; ++i) std::memcpy(copies[i].data(), params[i].grad().data<float>(), per * sizeof(float));
  };
  auto copy_parallel = [&](int) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) std::memcpy(copies[i].data(), params[i].grad().data<float>(), per * sizeof(float));
  };
  unscale(0);
  unscale(1);
  copy(0);
  copy_parallel(0);

  const double t_unscale = median_seconds(repeats, unscale);
  const double t_copy = median_seconds(repeats, copy);
  const double t_copy2 = median_seconds(repeats, copy_parallel);
  if (scaler.found_non_finite()) {
    std::fprintf(stderr, "unexpected non-finite gradients\n");
    return 1;
  }
  const double gb_unscale = bytes / t_unscale / 1e9;
  const double gb_copy = bytes / t_copy / 1e9;
  const double gb_copy2 = bytes / t_copy2 / 1e9;
  std::printf("unscale_bandwidth: %lld float32 gradients in %lld tensors (%.1f MB), %d threads, median of %d\n",
              static_cast<long long>(per * count), static_cast<long long>(count), bytes / 1e6,
              omp_get_max_threads(), repeats);
  std::printf("  fused unscale + check : %8.2f ms  %6.2f GB/s\n", t_unscale * 1e3, gb_unscale);
  std::printf("  memcpy                : %8.2f ms  %6.2f GB/s\n", t_copy * 1e3, gb_copy);
  std::printf("  memcpy, %d threads     : %8.2f ms  %6.2f GB/s\n", omp_get_max_threads(), t_copy2 * 1e3, gb_copy2);
  std::printf("  unscale / memcpy      : %6.1f %%  (target >= 70 %%)\n", 100.0 * gb_unscale / gb_copy);
  std::printf("  unscale / memcpy (%d thr): %6.1f %%\n", omp_get_max_threads(), 100.0 * gb_unscale / gb_copy2);
  return 0;
}
