// The CPU batch normalization kernels (backend/cpu/batch_norm.cpp)
// against a float64 reference written here from the definitions: batch
// statistics, output, and the gradients of input, weight and bias, in
// training and evaluation. Shapes cover both work splits (whole channels per
// thread, and channels cut into parts of the batch), spatial sizes that
// leave vector tails (49, 17, 1), every floating dtype, and both
// instruction-set variants (portable and AVX-512 where the CPU has it). Data
// far from zero, and a channel whose first rows are unlike the rest, check
// that the one-pass statistics keep float32 precision.
#include <boost/test/unit_test.hpp>

#include <omp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/batch_norm.hpp"
#include "core/simd.hpp"
#include "mixgrad/mixgrad.hpp"

namespace {

namespace mg = mixgrad;
namespace backend = mixgrad::backend;
namespace cpu = mixgrad::backend::cpu;
using mg::DType;
using mg::Tensor;

struct Reference {
  std::vector<double> mean, var, y, gx, gw, gb;
};

// Everything from the definitions, in double, from the values the kernel sees.
Reference reference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy, bool training,
                    const std::vector<double>& given_mean, const std::vector<double>& given_var, double eps) {
  const auto xv = x.to_vector<double>(), gv = gy.to_vector<double>();
  const auto wv = w.to_vector<double>(), bv = b.to_vector<double>();
  const int64_t n = x.shape()[0], c = x.shape()[1], s = x.numel() / (n * c);
  const double count = static_cast<double>(n * s);
  Reference r;
  r.mean = given_mean;
  r.var = given_var;
  if (training) {  // sums in long double: the reference must be better than the kernel in float64 too
    r.mean.assign(c, 0.0);
    r.var.assign(c, 0.0);
    for (int64_t ci = 0; ci < c; ++ci) {
      long double sum = 0;
      for (int64_t ni = 0; ni < n; ++ni)
        for (int64_t i = 0; i < s; ++i) sum += xv[(ni * c + ci) * s + i];
      const long double m = sum / count;
      long double sq = 0;
      for (int64_t ni = 0; ni < n; ++ni)
        for (int64_t i = 0; i < s; ++i) sq += (xv[(ni * c + ci) * s + i] - m) * (xv[(ni * c + ci) * s + i] - m);
      r.mean[ci] = static_cast<double>(m);
      r.var[ci] = static_cast<double>(sq / count);
    }
  }
  r.y.resize(xv.size());
  r.gx.resize(xv.size());
  r.gw.assign(c, 0.0);
  r.gb.assign(c, 0.0);
  for (int64_t ci = 0; ci < c; ++ci) {
    const double rstd = 1.0 / std::sqrt(r.var[ci] + eps);
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t k = (ni * c + ci) * s + i;
        const double xhat = (xv[k] - r.mean[ci]) * rstd;
        r.y[k] = xhat * wv[ci] + bv[ci];
        r.gb[ci] += gv[k];
        r.gw[ci] += gv[k] * xhat;
      }
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t k = (ni * c + ci) * s + i;
        const double xhat = (xv[k] - r.mean[ci]) * rstd;
        const double centred = training ? gv[k] - r.gb[ci] / count - xhat * r.gw[ci] / count : gv[k];
        r.gx[k] = wv[ci] * rstd * centred;
      }
  }
  return r;
}

// Largest |got - want| / (|want| + floor), over all elements.
double worst(const std::vector<double>& got, const std::vector<double>& want, double floor) {
  BOOST_TEST_REQUIRE(got.size() == want.size());
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(got[i] - want[i]) / (std::abs(want[i]) + floor));
  return e;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Tolerance of outputs stored in dtype (relative, with a floor of the tensor's scale).
double output_tol(DType dt) {
  switch (dt) {
    case DType::float64: return 1e-12;
    case DType::float32: return 2e-6;
    case DType::float16: return 2e-3;
    default: return 1e-2;  // bfloat16
  }
}

struct Case {
  std::string name;
  mg::Shape shape;
  std::function<Tensor(DType)> make;
};

Tensor from_values(const std::vector<double>& v, const mg::Shape& shape, DType dt) {
  return mg::tensor(v, shape, dt);
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  auto normal = [](mg::Shape shape, double mean, double std) {
    return [=](DType dt) {
      mg::manual_seed(5);
      return mg::normal(shape, mean, std, dt);
    };
  };
  cs.push_back({"whole channels, S = 196", {16, 32, 14, 14}, normal({16, 32, 14, 14}, 0.5, 2.0)});
  cs.push_back({"whole channels, S = 49", {40, 16, 7, 7}, normal({40, 16, 7, 7}, -1.0, 0.5)});
  cs.push_back({"parts of the batch, C = 3, S = 17 x 13", {64, 3, 17, 13}, normal({64, 3, 17, 13}, 0.0, 1.0)});
  cs.push_back({"parts of the batch, S = 1", {12000, 3}, normal({12000, 3}, 2.0, 3.0)});
  cs.push_back({"S = 1, two channel blocks", {600, 300}, normal({600, 300}, -1.0, 0.5)});
  cs.push_back({"S = 1, three channel blocks in parts", {130, 520}, normal({130, 520}, 0.5, 2.0)});
  cs.push_back({"parts of the batch, C = 1, 3-d", {300, 1, 130}, normal({300, 1, 130}, 0.0, 1.0)});
  cs.push_back({"far from zero", {32, 6, 16, 16}, normal({32, 6, 16, 16}, 1000.0, 1.0)});
  // Channel 0's first row sits 10^4 standard deviations away from the rest
  // (one row in 1024): a shift taken from it would leave the variance to
  // cancellation.
  {
    const mg::Shape shape{1024, 2, 7, 7};
    cs.push_back({"first row unlike the rest", shape, [shape](DType dt) {
                    std::mt19937 gen(3);
                    std::normal_distribution<double> d(0.0, 1.0);
                    std::vector<double> v(static_cast<size_t>(shape.numel()));
                    for (auto& e : v) e = d(gen);
                    for (int64_t i = 0; i < 49; ++i) v[i] += 1e4;
                    return from_values(v, shape, dt);
                  }});
  }
  {
    const mg::Shape shape{2048, 20};  // S = 1: channel 3's first row far off
    cs.push_back({"S = 1, first row unlike the rest", shape, [shape](DType dt) {
                    std::mt19937 gen(4);
                    std::normal_distribution<double> d(0.0, 1.0);
                    std::vector<double> v(static_cast<size_t>(shape.numel()));
                    for (auto& e : v) e = d(gen);
                    v[3] += 1e4;
                    return from_values(v, shape, dt);
                  }});
  }
  cs.push_back({"small, one thread", {3, 4, 5}, normal({3, 4, 5}, 0.0, 1.0)});
  return cs;
}

// Runs the kernels on one case and checks everything against the reference.
void check_case(const Case& cs, DType dt, bool training) {
  const int64_t c = cs.shape[1];
  const DType st = dt == DType::float64 ? DType::float64 : DType::float32;
  const Tensor x = cs.make(dt);
  mg::manual_seed(9);
  const Tensor w = mg::uniform({c}, 0.5, 1.5, st), b = mg::uniform({c}, -1, 1, st);
  const Tensor gy = mg::uniform(cs.shape, -1, 1, dt);
  const double eps = 1e-5;
  Tensor mean = mg::empty({c}, st), var = mg::empty({c}, st);
  std::vector<double> given_mean, given_var;
  if (!training) {
    mean = mg::uniform({c}, -0.5, 0.5, st);
    var = mg::uniform({c}, 0.5, 2.0, st);
    given_mean = mean.to_vector<double>();
    given_var = var.to_vector<double>();
  }
  const Reference ref = reference(x, w, b, gy, training, given_mean, given_var, eps);

  const Tensor y = mg::empty(cs.shape, dt);
  backend::batch_norm_forward(
      {.x = x, .weight = w, .bias = b, .mean = mean, .var = var, .y = y, .training = training, .eps = eps});
  const Tensor gx = mg::empty(cs.shape, dt), gw = mg::empty({c}, st), gb = mg::empty({c}, st);
  backend::batch_norm_backward({.grad_y = gy, .x = x, .weight = w, .mean = mean, .var = var, .grad_x = gx,
                                        .grad_weight = gw, .grad_bias = gb, .training = training, .eps = eps});

  const double stat_tol = dt == DType::float64 ? 1e-12 : 1e-6;
  if (training) {
    std::vector<double> spread(ref.var.size());
    for (size_t i = 0; i < spread.size(); ++i) spread[i] = std::sqrt(ref.var[i]);
    const auto m = mean.to_vector<double>(), v = var.to_vector<double>();
    for (size_t i = 0; i < m.size(); ++i) {
      // The mean to within float32 rounding of itself and a millionth of a standard deviation.
      BOOST_TEST(std::abs(m[i] - ref.mean[i]) <= stat_tol * (std::abs(ref.mean[i]) + spread[i]), "mean " << i);
      BOOST_TEST(std::abs(v[i] - ref.var[i]) <= 10 * stat_tol * ref.var[i], "var " << i);
    }
  }
  // The output and the gradients use the statistics as stored (float32 for
  // every input but float64): x - mean then carries the mean's rounding,
  // which is large against the spread when the data sits far from zero.
  double stored_mean_error = 0;
  for (size_t i = 0; i < ref.mean.size(); ++i)
    stored_mean_error = std::max(stored_mean_error, (dt == DType::float64 ? 0x1p-53 : 0x1p-24) *
                                                        std::abs(ref.mean[i]) / std::sqrt(ref.var[i] + eps));
  const double tol = output_tol(dt) + 2 * stored_mean_error;
  BOOST_TEST(worst(y.to_vector<double>(), ref.y, 1.0) <= tol);
  // Gradients sum many products: relative to the largest of them.
  BOOST_TEST(worst(gx.to_vector<double>(), ref.gx, max_abs(ref.gx)) <= 4 * tol);
  const double sum_tol =
      (dt == DType::float64 ? 1e-10 : (dt == DType::float32 ? 1e-5 : 4 * output_tol(dt))) + 2 * stored_mean_error;
  BOOST_TEST(worst(gw.to_vector<double>(), ref.gw, max_abs(ref.gw)) <= sum_tol);
  BOOST_TEST(worst(gb.to_vector<double>(), ref.gb, max_abs(ref.gb)) <= sum_tol);
}

// Two threads for the whole test (the splits depend on it), restored after.
struct TwoThreads {
  int before = omp_get_max_threads();
  TwoThreads() { mg::set_num_threads(2); }
  ~TwoThreads() { mg::set_num_threads(before); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_norm_kernel)

BOOST_AUTO_TEST_CASE(splits_cover_whole_channels_and_parts_of_the_batch) {
  BOOST_TEST(cpu::batch_norm_parts(16, 32, 2) == 1);
  BOOST_TEST(cpu::batch_norm_parts(40, 16, 2) == 1);
  BOOST_TEST(cpu::batch_norm_parts(64, 3, 2) == 6);
  BOOST_TEST(cpu::batch_norm_parts(12000, 3, 2) == 6);
  BOOST_TEST(cpu::batch_norm_parts(300, 1, 2) == 16);
  BOOST_TEST(cpu::batch_norm_parts(1024, 2, 2) == 1);
  BOOST_TEST(cpu::batch_norm_parts(4, 1, 2) == 4);  // never more parts than rows
  BOOST_TEST(cpu::batch_norm_parts(64, 3, 1) == 1);
  BOOST_TEST(cpu::batch_norm_parts(64, 17, 2) == 1);  // 17 >= 8 * 2
}

BOOST_AUTO_TEST_CASE(matches_the_float64_reference) {
  TwoThreads threads;
  std::vector<mg::simd::Level> levels{mg::simd::Level::portable};
  if (mg::simd::available() == mg::simd::Level::avx512) levels.push_back(mg::simd::Level::avx512);
  for (mg::simd::Level level : levels) {
    mg::simd::LevelScope scope(level);
    for (const Case& cs : cases())
      for (DType dt : {DType::float32, DType::bfloat16, DType::float16, DType::float64})
        for (bool training : {true, false}) {
          if (cs.name == "far from zero" && dt != DType::float32 && dt != DType::float64) continue;
          if (cs.name.find("first row unlike the rest") != std::string::npos && dt != DType::float32) continue;
          BOOST_TEST_CONTEXT(cs.name << ", " << dt << (training ? ", training" : ", eval") << ", simd level "
                                     << static_cast<int>(level)) {
            check_case(cs, dt, training);
          }
        }
  }
}

BOOST_AUTO_TEST_CASE(instruction_set_variants_agree) {
  if (mg::simd::available() != mg::simd::Level::avx512) return;
  TwoThreads threads;
  mg::manual_seed(21);
  const Tensor x = mg::normal({32, 5, 9, 11}, 0.3, 1.7, DType::bfloat16);
  auto run = [&](mg::simd::Level level) {
    mg::simd::LevelScope scope(level);
    Tensor mean = mg::empty({5}), var = mg::empty({5}), y = mg::empty(x.shape(), DType::bfloat16);
    backend::batch_norm_forward({.x = x, .weight = Tensor(), .bias = Tensor(), .mean = mean, .var = var, .y = y, .training = true});
    return std::vector<std::vector<double>>{mean.to_vector<double>(), var.to_vector<double>(), y.to_vector<double>()};
  };
  const auto a = run(mg::simd::Level::portable), b = run(mg::simd::Level::avx512);
  // The lanes see the same values in the same order; only fused multiply-adds round differently.
  for (size_t k = 0; k < a.size(); ++k) BOOST_TEST(worst(a[k], b[k], 1.0) <= 1e-6, "output " << k);
}

BOOST_AUTO_TEST_CASE(only_the_wanted_gradients_are_written) {
  TwoThreads threads;
  for (const mg::Shape& shape : {mg::Shape{64, 3, 17, 13}, mg::Shape{16, 32, 14, 14}}) {
    BOOST_TEST_CONTEXT("shape " << shape) {
      mg::manual_seed(22);
      const int64_t c = shape[1];
      const Tensor x = mg::normal(shape), gy = mg::normal(shape);
      Tensor mean = mg::empty({c}), var = mg::empty({c}), y = mg::empty(shape);
      backend::batch_norm_forward({.x = x, .weight = Tensor(), .bias = Tensor(), .mean = mean, .var = var, .y = y, .training = true});
      // Weight gradient alone, no weight (so zero), no input gradient.
      Tensor gw = mg::full({c}, 7.0);
      backend::batch_norm_backward(
          {.grad_y = gy, .x = x, .weight = Tensor(), .mean = mean, .var = var, .grad_x = Tensor(), .grad_weight = gw, .grad_bias = Tensor(), .training = true});
      BOOST_TEST(gw.to_vector<double>() == std::vector<double>(c, 0.0), boost::test_tools::per_element());
      // Bias gradient alone: the per-channel sums of gy.
      Tensor gb = mg::empty({c});
      backend::batch_norm_backward({.grad_y = gy, .x = x, .weight = Tensor(), .mean = mean, .var = var,
                                            .grad_x = Tensor(), .grad_weight = Tensor(), .grad_bias = gb, .training = true});
      const auto g = gy.to_vector<double>();
      const int64_t s = shape.numel() / (shape[0] * c);
      for (int64_t ci = 0; ci < c; ++ci) {
        double want = 0;
        for (int64_t ni = 0; ni < shape[0]; ++ni)
          for (int64_t i = 0; i < s; ++i) want += g[(ni * c + ci) * s + i];
        BOOST_TEST(std::abs(gb.at<double>({ci}) - want) <= 1e-5 * (1 + std::abs(want)), "channel " << ci);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
