// The shared element functors (kernels/grad_scaling.hpp) and the CPU multi-tensor
// pass (backend/multi_tensor.hpp) on their own: bit-level non-finite tests, and a
// long list whose elements are split across threads in the middle of
// tensors, with one bad value moved to the places a split could miss.
#include <boost/test/unit_test.hpp>

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>

#include "backend/copy.hpp"
#include "backend/loss_scale.hpp"
#include "backend/multi_tensor.hpp"
#include "kernels/grad_scaling.hpp"
#include "kernels/loops.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace k = mixgrad::kernels;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The fused pass with a fresh flag and `factor` as a float64 inv_scale;
// returns the flag as the kernel left it.
bool unscale(const std::vector<mg::Tensor>& ts, double factor) {
  const mg::Tensor found = mg::zeros({1});
  mg::backend::non_finite_check_and_unscale(ts, found, mg::scalar(factor, mg::DType::float64));
  return found.item<float>() != 0.f;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(multi_tensor_kernels)

BOOST_AUTO_TEST_CASE(non_finite_by_bits) {
  BOOST_TEST(k::is_non_finite(std::numeric_limits<float>::infinity()));
  BOOST_TEST(k::is_non_finite(-std::numeric_limits<float>::infinity()));
  BOOST_TEST(k::is_non_finite(std::numeric_limits<float>::quiet_NaN()));
  BOOST_TEST(!k::is_non_finite(FLT_MAX));
  BOOST_TEST(!k::is_non_finite(std::numeric_limits<float>::denorm_min()));
  BOOST_TEST(k::is_non_finite(kInf));
  BOOST_TEST(k::is_non_finite(kNaN));
  BOOST_TEST(!k::is_non_finite(DBL_MAX));
  BOOST_TEST(!k::is_non_finite(-0.0));
  BOOST_TEST(k::is_non_finite(mg::half::from_bits(0x7c00)));   // +inf
  BOOST_TEST(k::is_non_finite(mg::half::from_bits(0xfc00)));   // -inf
  BOOST_TEST(k::is_non_finite(mg::half::from_bits(0x7e00)));   // NaN
  BOOST_TEST(!k::is_non_finite(mg::half::from_bits(0x7bff)));  // 65504
  BOOST_TEST(!k::is_non_finite(mg::half::from_bits(0x0001)));  // smallest subnormal
  BOOST_TEST(k::is_non_finite(mg::bfloat16::from_bits(0x7f80)));
  BOOST_TEST(k::is_non_finite(mg::bfloat16::from_bits(0xffc0)));
  BOOST_TEST(!k::is_non_finite(mg::bfloat16::from_bits(0x7f7f)));
  BOOST_TEST(k::is_nan(kNaN));
  BOOST_TEST(!k::is_nan(kInf));
  BOOST_TEST(k::is_nan(std::numeric_limits<float>::quiet_NaN()));
  BOOST_TEST(!k::is_nan(-std::numeric_limits<float>::infinity()));
}

BOOST_AUTO_TEST_CASE(scale_check_functor_flags_overflow_of_the_stored_type) {
  mg::half h(60000.f);
  BOOST_TEST(!k::ScaleCheck<mg::half>{0.5f}(h));
  BOOST_TEST(static_cast<float>(h) == 30000.f);
  BOOST_TEST(k::ScaleCheck<mg::half>{4.0f}(h));  // 120000 is inf in float16
  mg::bfloat16 b(3e38f);
  BOOST_TEST(k::ScaleCheck<mg::bfloat16>{2.0f}(b));
  double d = 1e300;
  BOOST_TEST(!k::ScaleCheck<double>{1e5}(d));
  BOOST_TEST(d == 1e300 * 1e5);
  float f = 1e30f;
  BOOST_TEST(k::ScaleCheck<float>{1e10f}(f));
  BOOST_TEST(k::applied_factor<mg::bfloat16>(1.0 / 3.0) == static_cast<float>(1.0 / 3.0));
  BOOST_TEST(k::applied_factor<double>(1.0 / 3.0) == 1.0 / 3.0);
}

BOOST_AUTO_TEST_CASE(one_pass_over_many_tensors_split_between_threads) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-100.0, 100.0);
  const std::vector<mg::DType> dtypes = {mg::DType::float32, mg::DType::bfloat16, mg::DType::float16,
                                         mg::DType::float64};
  std::vector<mg::Tensor> ts;
  std::vector<std::vector<double>> values;
  int64_t total = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t n = 1 + (i * 104729) % 3001;
    std::vector<double> v(n);
    for (double& x : v) x = u(rng);
    ts.push_back(mg::tensor(v, {n}, dtypes[i % dtypes.size()]));
    values.push_back(ts.back().to_vector<double>());  // as stored, after rounding
    total += n;
  }
  BOOST_TEST_REQUIRE(total > 4 * mixgrad::kernels::kParallelGrain);
  const double factor = 1.0 / 12.0;
  BOOST_TEST(!unscale(ts, factor));
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto got = ts[i].to_vector<double>();
    for (size_t j = 0; j < got.size(); ++j) {
      double expect;
      switch (ts[i].dtype()) {
        case mg::DType::float64: expect = values[i][j] * factor; break;
        case mg::DType::float32: expect = static_cast<float>(values[i][j]) * static_cast<float>(factor); break;
        case mg::DType::float16:
          expect = static_cast<float>(mg::half(static_cast<float>(values[i][j]) * static_cast<float>(factor)));
          break;
        default:
          expect = static_cast<float>(mg::bfloat16(static_cast<float>(values[i][j]) * static_cast<float>(factor)));
      }
      if (got[j] != expect) {
        BOOST_TEST(got[j] == expect, "tensor " << i << " element " << j);
        return;
      }
    }
  }

  // One bad element at the first, last, and middle positions (where the
  // two threads' shares meet), in whichever tensor holds that position.
  for (int64_t pos : {int64_t{0}, total / 2 - 1, total / 2, total / 2 + 1, total - 1}) {
    for (double bad : {kInf, kNaN}) {
      int64_t at = pos;
      size_t i = 0;
      while (at >= ts[i].numel()) at -= ts[i++].numel();
      mg::Tensor one = ts[i].narrow(0, at, 1);
      const double before = one.item<double>();
      mg::backend::fill(one, bad);
      BOOST_TEST(unscale(ts, 1.0), "bad value at " << pos << " not found");
      mg::backend::fill(one, before);
    }
  }
  BOOST_TEST(!unscale(ts, 1.0));
}

BOOST_AUTO_TEST_CASE(strided_tensors_and_scaled_copies) {
  mg::Tensor base = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}, {2, 4});
  mg::Tensor cols = mg::F::transpose(base, 0, 1).narrow(0, 1, 2);  // elements 2, 6, 3, 7
  BOOST_TEST(!unscale({cols}, 2.0));
  BOOST_TEST(base.to_vector<float>() == std::vector<float>({1.f, 4.f, 6.f, 4.f, 5.f, 12.f, 14.f, 8.f}),
             boost::test_tools::per_element());
  const mg::Tensor norm = mg::backend::grad_norm(std::vector<mg::Tensor>{cols}, kInf);
  BOOST_TEST(norm.item<double>() == 14.0);
  mg::backend::clip_by_norm(std::vector<mg::Tensor>{cols}, norm, 7.0);  // factor 7 / 14, read from the tensor
  BOOST_TEST(base.to_vector<float>() == std::vector<float>({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}),
             boost::test_tools::per_element());
  mg::backend::clip_by_norm(std::vector<mg::Tensor>{cols}, mg::scalar(kInf, mg::DType::float64), 1.0);
  BOOST_TEST(base.to_vector<float>()[1] == 2.f);  // a non-finite norm leaves them alone

  mg::Tensor dst = mg::empty({2, 2}, mg::DType::bfloat16);
  const mg::Tensor eight = mg::scalar(8.0, mg::DType::float64);
  mg::backend::scale_copy(mg::F::transpose(mg::tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}), 0, 1), dst, eight);
  BOOST_TEST(dst.to_vector<float>() == std::vector<float>({8.f, 24.f, 16.f, 32.f}), boost::test_tools::per_element());
  mg::backend::scale_copy(mg::Tensor(), dst, eight);  // no source: the scale everywhere
  BOOST_TEST(dst.to_vector<float>() == std::vector<float>(4, 8.f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(found_inf_is_only_ever_set_and_arguments_are_checked) {
  mg::Tensor g = mg::tensor({1.f, 2.f}, {2});
  const mg::Tensor found = mg::full({1}, 1.0);
  const mg::Tensor one = mg::scalar(1.0, mg::DType::float64);
  mg::backend::non_finite_check_and_unscale(std::vector<mg::Tensor>{g}, found, one);
  BOOST_TEST(found.item<float>() == 1.f);  // a clean pass does not reset it
  BOOST_CHECK_THROW(mg::backend::non_finite_check_and_unscale(std::vector<mg::Tensor>{g}, mg::zeros({2}), one),
                    mg::ShapeError);
  BOOST_CHECK_THROW(
      mg::backend::non_finite_check_and_unscale(std::vector<mg::Tensor>{g}, mg::zeros({1}, mg::DType::float64), one),
      mg::DTypeError);
  BOOST_CHECK_THROW(mg::backend::non_finite_check_and_unscale(std::vector<mg::Tensor>{g}, mg::zeros({1}),
                                                              mg::scalar(1.0, mg::DType::float16)),
                    mg::DTypeError);
  BOOST_TEST(g.to_vector<float>() == std::vector<float>({1.f, 2.f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(scale_update_on_the_device) {
  const mg::backend::ScaleUpdateOptions o{
      .growth_factor = 2.0, .backoff_factor = 0.25, .min_scale = 1.0, .max_scale = 64.0, .growth_interval = 2};
  const mg::Tensor scale = mg::scalar(16.0, mg::DType::float64);
  const mg::Tensor inv = mg::scalar(1.0 / 16, mg::DType::float64);
  const mg::Tensor tracker = mg::scalar(0, mg::DType::int64);
  const mg::Tensor clean = mg::zeros({}), overflow = mg::full({}, 1.0);
  mg::backend::update_scale(scale, inv, tracker, clean, o);
  BOOST_TEST(scale.item<double>() == 16.0);
  BOOST_TEST(tracker.item<int64_t>() == 1);
  mg::backend::update_scale(scale, inv, tracker, mg::Tensor(), o);  // no flag: a clean step
  BOOST_TEST(scale.item<double>() == 32.0);
  BOOST_TEST(inv.item<double>() == 1.0 / 32);
  BOOST_TEST(tracker.item<int64_t>() == 0);
  for (int i = 0; i < 4; ++i) mg::backend::update_scale(scale, inv, tracker, clean, o);
  BOOST_TEST(scale.item<double>() == 64.0);  // clamped to max_scale
  mg::backend::update_scale(scale, inv, tracker, clean, o);
  mg::backend::update_scale(scale, inv, tracker, overflow, o);
  BOOST_TEST(scale.item<double>() == 16.0);
  BOOST_TEST(tracker.item<int64_t>() == 0);
  mg::backend::update_scale(scale, inv, tracker, overflow, o);
  mg::backend::update_scale(scale, inv, tracker, overflow, o);
  BOOST_TEST(scale.item<double>() == 1.0);  // clamped to min_scale
  BOOST_TEST(inv.item<double>() == 1.0);
}

BOOST_AUTO_TEST_CASE(a_factor_that_is_not_finite_where_applied_is_refused) {
  // 1e39 rounds to inf as a float: 0 * inf would be NaN, a false overflow.
  mg::Tensor f32 = mg::tensor({0.f, 1.f}, {2});
  mg::Tensor f16 = mg::tensor({0.0, 1.0}, {2}, mg::DType::float16);
  mg::Tensor f64 = mg::tensor({0.0, 1.0}, {2}, mg::DType::float64);
  for (const mg::Tensor& t : {f32, f16}) {
    BOOST_CHECK_THROW(unscale({t}, 1e39), mg::ValueError);
    BOOST_TEST(t.to_vector<double>() == std::vector<double>({0.0, 1.0}), boost::test_tools::per_element());
  }
  // A list with any non-float64 tensor applies the factor in float.
  BOOST_CHECK_THROW(unscale({f64, f32}, 1e39), mg::ValueError);
  BOOST_TEST(f64.to_vector<double>() == std::vector<double>({0.0, 1.0}), boost::test_tools::per_element());
  for (double bad : {kInf, -kInf, kNaN})
    BOOST_CHECK_THROW(unscale({f64}, bad), mg::ValueError);
  // float64 alone is scaled in double, where 1e39 is finite.
  BOOST_TEST(!unscale({f64}, 1e39));
  BOOST_TEST(f64.to_vector<double>() == std::vector<double>({0.0, 1e39}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
