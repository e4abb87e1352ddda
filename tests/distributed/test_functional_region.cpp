// Megatron's regions, copy_to_parallel_region ("f": the identity forward,
// the all-reduced gradient) and reduce_from_parallel_region ("g": the
// all-reduced forward, the identity gradient), and two stacked
// tensor-parallel blocks whose input and weights get the gradients of the
// same blocks computed whole in one process (on 1, 2 and 3 ranks).
#include <cmath>
#include <vector>

#include "test_functional_util.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace DF = mixgrad::distributed::functional;
using dist_test::data;
using dist_test::sum_of;
using dist_test::world;

namespace {

int W() { return world().world_size(); }

// A column-parallel then a row-parallel Linear: rank r holds rows r/W of w1
// and columns r/W of w2. Without a group, the whole block.
mg::Tensor block(const mg::Tensor& x, const mg::Tensor& w1, const mg::Tensor& w2, bool parallel) {
  const mg::Tensor in = parallel ? DF::copy_to_parallel_region(world(), x) : x;
  const mg::Tensor partial = F::linear(F::tanh(F::linear(in, w1)), w2);
  return parallel ? DF::reduce_from_parallel_region(world(), partial) : partial;
}

mg::Tensor weights(int seed, const mg::Shape& shape) { return F::mul(data(seed, shape), 0.25); }

}  // namespace

BOOST_AUTO_TEST_SUITE(parallel_regions)

BOOST_AUTO_TEST_CASE(forward_is_the_input_and_backward_sums_every_ranks_gradient) {
  const int r = world().rank();
  mg::Tensor x = data(7, {3, 4});  // replicated: the same on every rank
  mg::autodiff::GradManager gm;
  gm.attach(x);
  mg::Tensor y;
  {
    auto recording = gm.record();
    y = DF::copy_to_parallel_region(world(), x);
    gm.backward(F::sum(F::mul(y, data(100 + r, {3, 4}))));
  }
  test_util::check_close(y, x.detach(), 0.0);
  std::vector<mg::Tensor> ws;
  for (int k = 0; k < W(); ++k) ws.push_back(data(100 + k, {3, 4}));
  test_util::check_close(x.grad(), sum_of(ws), 1e-6);
}

BOOST_AUTO_TEST_CASE(reduce_from_parallel_region_sums_forward_and_passes_the_gradient) {
  const int r = world().rank();
  mg::Tensor x = data(r, {3, 4});
  mg::autodiff::GradManager gm;
  gm.attach(x);
  mg::Tensor y;
  {
    auto recording = gm.record();
    y = DF::reduce_from_parallel_region(world(), x);
    gm.backward(F::sum(F::mul(y, data(100 + r, {3, 4}))));
  }
  std::vector<mg::Tensor> xs;
  for (int k = 0; k < W(); ++k) xs.push_back(data(k, {3, 4}));
  test_util::check_close(y, sum_of(xs), 1e-6);
  test_util::check_close(x.grad(), data(100 + r, {3, 4}), 0.0);
}

BOOST_AUTO_TEST_CASE(two_stacked_blocks_match_one_process) {
  const int r = world().rank(), h = 36;  // splits over 1, 2 and 3 ranks
  const int64_t n = h / W();
  const mg::Tensor w1 = weights(1, {h, 4}), w2 = weights(2, {4, h}), v1 = weights(3, {h, 4}), v2 = weights(4, {4, h});
  const mg::Tensor target = data(5, {5, 4});
  auto loss_of = [&](const mg::Tensor& y) { return F::mse_loss(y, target); };

  mg::Tensor x1 = data(6, {5, 4});
  std::vector<mg::Tensor> whole{w1.clone(), w2.clone(), v1.clone(), v2.clone()};
  mg::autodiff::GradManager ref;
  ref.attach(x1);
  ref.attach(whole);
  {
    auto recording = ref.record();
    ref.backward(loss_of(block(block(x1, whole[0], whole[1], false), whole[2], whole[3], false)));
  }

  mg::Tensor x = data(6, {5, 4});
  std::vector<mg::Tensor> mine{F::narrow(w1, 0, r * n, n).clone(), F::narrow(w2, 1, r * n, n).clone(),
                               F::narrow(v1, 0, r * n, n).clone(), F::narrow(v2, 1, r * n, n).clone()};
  mg::autodiff::GradManager gm;
  gm.attach(x);
  gm.attach(mine);
  {
    auto recording = gm.record();
    gm.backward(loss_of(block(block(x, mine[0], mine[1], true), mine[2], mine[3], true)));  // the whole loss
  }
  test_util::check_close(x.grad(), x1.grad(), 1e-5);
  for (int i = 0; i < 4; ++i)
    BOOST_TEST_CONTEXT("weight " << i) {
      const int axis = i % 2 == 0 ? 0 : 1;
      test_util::check_close(mine[i].grad(), F::narrow(whole[i].grad(), axis, r * n, n), 1e-5);
    }
}

BOOST_AUTO_TEST_CASE(undefined_input_is_a_value_error) {
  BOOST_CHECK_THROW(DF::copy_to_parallel_region(world(), mg::Tensor()), mg::ValueError);
  BOOST_CHECK_THROW(DF::reduce_from_parallel_region(world(), mg::Tensor()), mg::ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
