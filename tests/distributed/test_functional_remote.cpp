// remote_send / remote_recv: a pipeline over every rank (rank k receives
// from k - 1, scales by its own parameter, sends to k + 1; the last rank
// takes the loss) has the gradients of the same chain in one process, and a
// send whose receiver does not record gets no gradient (and does not wait
// for one).
#include <vector>

#include "test_functional_util.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace DF = mixgrad::distributed::functional;
using dist_test::data;
using dist_test::world;

BOOST_AUTO_TEST_SUITE(functional_remote)

BOOST_AUTO_TEST_CASE(a_pipeline_has_the_gradients_of_one_process) {
  const int W = world().world_size(), r = world().rank();
  const mg::Shape shape{3, 2};
  // One process: x -> x * p_0 -> ... -> x * p_0 * ... * p_{W-1} -> sum(h * w).
  std::vector<mg::Tensor> ps;
  for (int k = 0; k < W; ++k) ps.push_back(data(10 + k, shape));
  mg::Tensor x_ref = data(0, shape);
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(ps).attach(x_ref);
  {
    auto recording = ref_gm.record();
    mg::Tensor h = x_ref;
    for (const mg::Tensor& p : ps) h = F::mul(h, p);
    ref_gm.backward(F::sum(F::mul(h, data(100, shape))));
  }
  // W processes: rank k holds p_k (and rank 0 the input).
  mg::Tensor p = data(10 + r, shape), x = data(0, shape);
  mg::autodiff::GradManager gm;
  gm.attach(p).attach(x);
  {
    auto recording = gm.record();
    mg::Tensor h = F::mul(r == 0 ? x : DF::remote_recv(world(), r - 1), p);
    if (r + 1 < W)
      gm.backward(DF::remote_send(world(), h, r + 1));
    else
      gm.backward(F::sum(F::mul(h, data(100, shape))));
  }
  test_util::check_close(p.grad(), ps[r].grad(), 1e-6);
  if (r == 0) test_util::check_close(x.grad(), x_ref.grad(), 1e-6);
}

// A ring: rank r sends 2 x_r to r + 1 and receives from r - 1 in a no_grad
// scope, so no receiver records: every sender's backward ends at once with
// no gradient for x. Rank 0 sends first, the others receive first.
BOOST_AUTO_TEST_CASE(a_receiver_that_does_not_record_sends_no_gradient) {
  const int W = world().world_size(), r = world().rank();
  if (W == 1) {  // alone there is no peer: the pair's checks say so
    test_util::check_error<mg::ValueError>([] { DF::remote_recv(world(), 0); },
                                           {"distributed::functional::remote_recv", "src 0 is not another rank"});
    return;
  }
  mg::Tensor x = data(r, {4});
  mg::autodiff::GradManager gm;
  gm.attach(x);
  mg::Tensor token, y;
  {
    auto recording = gm.record();
    auto send = [&] { token = DF::remote_send(world(), F::mul(x, 2.0), (r + 1) % W); };
    auto receive = [&] {
      mg::autodiff::no_grad unrecorded;
      y = DF::remote_recv(world(), (r + W - 1) % W);
    };
    if (r == 0) send(), receive();
    else receive(), send();
    gm.backward(token);
  }
  BOOST_TEST(!x.grad().defined());
  BOOST_TEST(y.dtype() == mg::DType::float32);
  test_util::check_close(y, F::mul(data((r + W - 1) % W, {4}), 2.0), 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
