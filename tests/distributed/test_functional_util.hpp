// Helpers of the recorded-collective tests: every rank builds the same
// global data from seeds (rank k's tensor is data(k, shape)), runs the op on
// its own share, and compares its result and gradient with the same
// computation done in this one process on every rank's tensor.
#pragma once

#include <functional>
#include <vector>

#include "../common/test_util.hpp"
#include "dist_util.hpp"

namespace dist_test {

namespace mg = mixgrad;

/// Quarter-integers in [-2.75, 2.75]: sums of a few are exact in every
/// floating dtype, and seeds 0..22 differ at every element (no ties).
inline mg::Tensor data(int seed, const mg::Shape& shape, mg::DType dtype = mg::DType::float32) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>((static_cast<int64_t>(i) * 7 + seed * 5) % 23 - 11) / 4.0;
  return mg::tensor(v, shape, dtype);
}

/// The op on this rank's tensor.
using Distributed = std::function<mg::Tensor(const mg::Tensor& x)>;
/// Every rank's result from every rank's tensor, in one process; undefined
/// for a rank whose result is a token.
using Reference = std::function<std::vector<mg::Tensor>(const std::vector<mg::Tensor>& xs)>;

/// The loss of rank k: sum(y * data(100 + k)) (a token's own value otherwise).
inline mg::Tensor loss_of(const mg::Tensor& y, int k, bool token) {
  return token ? y : mg::F::sum(mg::F::mul(y, data(100 + k, y.shape(), y.dtype())));
}

/// Checks the op's result and x's gradient on this rank against the one
/// process reference (a rank that gets no gradient there gets zeros).
inline void check_against_one_process(const mg::Shape& shape, const Distributed& op, const Reference& ref) {
  const int W = world().world_size(), r = world().rank();
  std::vector<mg::Tensor> xs;
  for (int k = 0; k < W; ++k) xs.push_back(data(k, shape));
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(xs);
  std::vector<mg::Tensor> ys;
  {
    auto recording = ref_gm.record();
    ys = ref(xs);
    mg::Tensor loss;
    for (int k = 0; k < W; ++k)
      if (ys[k].defined()) {
        const mg::Tensor term = loss_of(ys[k], k, false);
        loss = loss.defined() ? mg::F::add(loss, term) : term;
      }
    ref_gm.backward(loss);
  }
  mg::Tensor x = data(r, shape);
  mg::autodiff::GradManager gm;
  gm.attach(x);
  mg::Tensor y;
  {
    auto recording = gm.record();
    y = op(x);
    gm.backward(loss_of(y, r, !ys[r].defined()));
  }
  BOOST_TEST(y.dtype() == x.dtype());
  if (ys[r].defined()) {
    test_util::check_close(y, ys[r].detach(), 1e-6);
  } else {
    BOOST_TEST(y.ndim() == 0);
    BOOST_TEST(test_util::values(y) == std::vector<double>{0.0});
  }
  BOOST_TEST_REQUIRE(x.grad().defined());
  const mg::Tensor want = xs[r].grad().defined() ? xs[r].grad() : mg::zeros_like(x);
  test_util::check_close(x.grad(), want, 1e-6);
}

/// The sum of tensors, in order.
inline mg::Tensor sum_of(const std::vector<mg::Tensor>& xs) {
  mg::Tensor s = xs[0];
  for (size_t k = 1; k < xs.size(); ++k) s = mg::F::add(s, xs[k]);
  return s;
}

}  // namespace dist_test
