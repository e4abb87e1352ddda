// optim::clip_grad_norm: the total norm over all grads, in-place clipping.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "amp_test_util.hpp"

namespace mg = mixgrad;
using amptest::param_with_grad;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// clip_grad_norm, its norm read on the host: a 0-d float64 tensor on the
// gradients' device (the CPU here).
double clip(const std::vector<mg::Tensor>& ts, double max_norm, double norm_type = 2.0) {
  const mg::Tensor norm = mg::optim::clip_grad_norm(ts, max_norm, norm_type);
  BOOST_TEST(norm.ndim() == 0);
  BOOST_TEST(norm.dtype() == mg::DType::float64);
  BOOST_TEST(norm.device().is_cpu());
  return norm.item<double>();
}
}  // namespace

BOOST_AUTO_TEST_SUITE(clip_grad)

BOOST_AUTO_TEST_CASE(l2_norm_over_all_grads_and_clipping) {
  mg::Tensor a = param_with_grad({3.0, 4.0}, mg::DType::float32);
  mg::Tensor b = param_with_grad({12.0}, mg::DType::float32);
  mg::Tensor none = mg::zeros({2});
  BOOST_TEST(clip({a, none, b}, 20.0) == 13.0);  // below: untouched
  BOOST_TEST(a.grad().to_vector<float>() == std::vector<float>({3.f, 4.f}), boost::test_tools::per_element());
  BOOST_TEST(clip({a, b}, 13.0) == 13.0);  // equal: untouched
  BOOST_TEST(b.grad().item<float>() == 12.f);

  const uint64_t version = a.grad().version();
  const double norm = clip({a, none, b}, 5.2);
  BOOST_TEST(a.grad().version() > version);
  BOOST_TEST(norm == 13.0);
  const float k = static_cast<float>(5.2 / 13.0);
  BOOST_TEST(a.grad().to_vector<float>() == std::vector<float>({3.f * k, 4.f * k}), boost::test_tools::per_element());
  BOOST_TEST(b.grad().item<float>() == 12.f * k);
  BOOST_TEST(!none.grad().defined());
  BOOST_TEST(clip({a, b}, 100.0) == 5.2, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(other_norm_types) {
  const std::vector<double> ga = {1.5, -4.0, 0.25};
  const std::vector<double> gb = {-2.0, 3.0};
  auto make = [&] {
    return std::vector<mg::Tensor>{param_with_grad(ga, mg::DType::float32), param_with_grad(gb, mg::DType::float64)};
  };
  BOOST_TEST(clip(make(), 100.0, kInf) == 4.0);
  BOOST_TEST(clip(make(), 100.0, 1.0) == 10.75);
  double s3 = 0;
  for (double v : ga) s3 += std::pow(std::abs(v), 3.0);
  for (double v : gb) s3 += std::pow(std::abs(v), 3.0);
  BOOST_TEST(clip(make(), 100.0, 3.0) == std::cbrt(s3), boost::test_tools::tolerance(1e-14));
  double sh = 0;
  for (double v : ga) sh += std::sqrt(std::abs(v));
  for (double v : gb) sh += std::sqrt(std::abs(v));
  BOOST_TEST(clip(make(), 100.0, 0.5) == sh * sh, boost::test_tools::tolerance(1e-14));

  auto ts = make();
  BOOST_TEST(clip(ts, 2.0, kInf) == 4.0);
  BOOST_TEST(ts[0].grad().to_vector<float>() == std::vector<float>({0.75f, -2.f, 0.125f}),
             boost::test_tools::per_element());
  BOOST_TEST(ts[1].grad().to_vector<double>() == std::vector<double>({-1.0, 1.5}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(low_precision_grads) {
  for (mg::DType dt : {mg::DType::float16, mg::DType::bfloat16}) {
    mg::Tensor a = param_with_grad({6.0, -8.0}, dt);
    BOOST_TEST(clip({a}, 5.0) == 10.0);
    BOOST_TEST(a.grad().dtype() == dt);
    BOOST_TEST(a.grad().to_vector<double>() == std::vector<double>({3.0, -4.0}), boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(non_finite_norms_leave_grads_alone) {
  mg::Tensor a = param_with_grad({1.0, kInf}, mg::DType::float32);
  mg::Tensor b = param_with_grad({2.0}, mg::DType::bfloat16);
  BOOST_TEST(std::isinf(clip({a, b}, 1.0)));
  BOOST_TEST(b.grad().item<float>() == 2.f);
  BOOST_TEST(std::isinf(clip({a, b}, 1.0, kInf)));
  mg::Tensor c = param_with_grad({kNaN, 1e30}, mg::DType::float32);
  BOOST_TEST(std::isnan(clip({b, c}, 1.0)));
  BOOST_TEST(std::isnan(clip({b, c}, 1.0, kInf)));
  BOOST_TEST(std::isnan(clip({b, c}, 1.0, 1.0)));
  BOOST_TEST(b.grad().item<float>() == 2.f);
  BOOST_TEST(c.grad().to_vector<float>()[1] == 1e30f);
}

BOOST_AUTO_TEST_CASE(huge_and_tiny_float64_grads_do_not_overflow_the_sum) {
  mg::Tensor big = param_with_grad({3e200, 4e200}, mg::DType::float64);
  BOOST_TEST(clip({big}, 1e300) == 5e200, boost::test_tools::tolerance(1e-15));
  mg::Tensor tiny = param_with_grad({3e-200, -4e-200}, mg::DType::float64);
  BOOST_TEST(clip({tiny}, 1.0) == 5e-200, boost::test_tools::tolerance(1e-15));
  mg::Tensor zero = param_with_grad({0.0, 0.0}, mg::DType::float64);
  BOOST_TEST(clip({zero}, 1.0) == 0.0);
}

BOOST_AUTO_TEST_CASE(many_tensors_match_a_serial_double_sum) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<mg::Tensor> ts;
  double sum = 0;
  for (int i = 0; i < 60; ++i) {
    const int64_t n = 1 + (i * 7919) % 5000;
    std::vector<float> g(n);
    for (float& v : g) {
      v = u(rng);
      sum += static_cast<double>(v) * v;
    }
    mg::Tensor p = mg::zeros({n});
    p.set_grad(mg::tensor(g, {n}));
    ts.push_back(p);
  }
  BOOST_TEST(clip(ts, 1e9) == std::sqrt(sum), boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(invalid_arguments_throw_and_change_nothing) {
  mg::Tensor a = param_with_grad({3.0, 4.0}, mg::DType::float32);
  for (double bad : {-1.0, kNaN, kInf}) BOOST_CHECK_THROW(clip({a}, bad), mg::ValueError);
  for (double bad : {0.0, -2.0, kNaN, -kInf}) BOOST_CHECK_THROW(clip({a}, 1.0, bad), mg::ValueError);
  mg::Tensor ints = mg::zeros({1});
  const mg::Tensor int_grad = mg::tensor(std::vector<int64_t>{5}, {1});
  BOOST_CHECK_THROW(ints.set_grad(int_grad), mg::DTypeError);
  ints.impl()->grad = int_grad;  // planted past set_grad: clip_grad_norm must refuse it too
  BOOST_CHECK_THROW(clip({a, ints}, 1.0), mg::DTypeError);
  BOOST_TEST(a.grad().to_vector<float>() == std::vector<float>({3.f, 4.f}), boost::test_tools::per_element());
  BOOST_TEST(clip({}, 1.0) == 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
