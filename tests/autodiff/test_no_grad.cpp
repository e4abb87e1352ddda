// no_grad / inference_mode: ops inside the scope are not recorded, their
// outputs are not tracked, and the state is nestable, exception-safe and per
// thread.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "autodiff/inspect.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using mg::autodiff::GradManager;
using mg::autodiff::no_grad;
using mg::autodiff::detail::tape_size;
namespace tt = boost::test_tools;

namespace {
mg::Tensor vec(std::initializer_list<float> v) { return mg::tensor(v, {static_cast<int64_t>(v.size())}); }
std::vector<float> values(const mg::Tensor& t) { return t.to_vector<float>(); }
}  // namespace

BOOST_AUTO_TEST_CASE(op_inside_no_grad_contributes_no_gradient) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  mg::Tensor side;
  {
    no_grad guard;
    side = mg::F::mul(w, 3.0);  // not recorded, so not tracked either
  }
  // Without the scope w would get 2 + 5 * 3 = 17 per element.
  gm.backward(mg::F::add(mg::F::mul(w, 2.0), mg::F::mul(side, 5.0)));
  BOOST_TEST(values(w.grad()) == std::vector<float>({2, 2}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(output_made_inside_no_grad_is_not_tracked) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  mg::Tensor side;
  {
    no_grad guard;
    side = mg::F::mul(w, 3.0);
  }
  const size_t before = tape_size(gm);
  auto y = mg::F::mul(side, 2.0);  // an op on an untracked input only: not recorded
  BOOST_TEST(tape_size(gm) == before);
  gm.backward(y);
  BOOST_TEST(!w.grad().defined());
}

BOOST_AUTO_TEST_CASE(recording_resumes_after_the_scope) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  {
    no_grad guard;
    BOOST_TEST(!mg::autodiff::is_grad_enabled());
    (void)mg::F::mul(w, 3.0);
  }
  BOOST_TEST(mg::autodiff::is_grad_enabled());
  BOOST_TEST(tape_size(gm) == 0u);
  auto y = mg::F::mul(w, w);
  BOOST_TEST(tape_size(gm) == 1u);
  gm.backward(y);
  BOOST_TEST(values(w.grad()) == std::vector<float>({2, 4}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(scopes_nest_and_recording_resumes_at_the_outermost) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  {
    no_grad outer;
    {
      no_grad inner;
      (void)mg::F::mul(w, 3.0);
    }
    BOOST_TEST(!mg::autodiff::is_grad_enabled());  // the outer scope still holds
    (void)mg::F::mul(w, 3.0);
    BOOST_TEST(tape_size(gm) == 0u);
  }
  BOOST_TEST(mg::autodiff::is_grad_enabled());
  (void)mg::F::mul(w, 3.0);
  BOOST_TEST(tape_size(gm) == 1u);
}

BOOST_AUTO_TEST_CASE(exception_inside_the_scope_restores_the_state) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  try {
    no_grad outer;
    no_grad inner;
    (void)mg::F::mul(w, 3.0);
    throw std::runtime_error("leave");
  } catch (const std::runtime_error&) {
  }
  BOOST_TEST(mg::autodiff::is_grad_enabled());
  BOOST_TEST(tape_size(gm) == 0u);
  gm.backward(mg::F::mul(w, 4.0));
  BOOST_TEST(values(w.grad()) == std::vector<float>({4, 4}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(update_inside_no_grad_creates_no_tape_entries) {
  // An optimizer-style step written by hand in the middle of a recording:
  // w' = w - lr * g, then a moving average; none of it lands on the tape.
  GradManager gm;
  auto w = vec({1, 2, 3});
  auto ema = vec({0, 0, 0});
  gm.attach(w);
  auto r = gm.record();
  auto loss = mg::F::sum(mg::F::mul(w, w));
  const size_t before = tape_size(gm);
  BOOST_TEST(before == 2u);  // mul and sum
  {
    no_grad guard;
    auto g = mg::F::mul(w, 2.0);
    auto w_new = mg::F::sub(w, mg::F::mul(g, 0.1));
    ema = mg::F::add(mg::F::mul(ema, 0.9), mg::F::mul(w_new, 0.1));
  }
  BOOST_TEST(tape_size(gm) == before);
  const std::vector<float> want{0.08f, 0.16f, 0.24f};
  for (size_t i = 0; i < want.size(); ++i) BOOST_TEST(std::abs(values(ema)[i] - want[i]) < 1e-6f);
  gm.backward(loss);
  BOOST_TEST(values(w.grad()) == std::vector<float>({2, 4, 6}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(no_grad_is_per_thread) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  no_grad guard;  // this thread only
  bool other_enabled = false;
  std::thread other([&] {
    other_enabled = mg::autodiff::is_grad_enabled();
    GradManager gm2;
    auto v = vec({3, 4});
    gm2.attach(v);
    auto r2 = gm2.record();
    gm2.backward(mg::F::mul(v, 5.0));  // records: the scope is not on this thread
  });
  other.join();
  BOOST_TEST(other_enabled);
  BOOST_TEST(!mg::autodiff::is_grad_enabled());
  (void)mg::F::mul(w, 3.0);
  BOOST_TEST(tape_size(gm) == 0u);
}

BOOST_AUTO_TEST_CASE(a_scope_on_another_thread_does_not_stop_this_recording) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  std::thread other([&] {
    no_grad guard;
    (void)mg::F::mul(w, 100.0);  // another thread: never recorded by gm anyway
  });
  other.join();
  BOOST_TEST(mg::autodiff::is_grad_enabled());
  gm.backward(mg::F::mul(w, 2.0));
  BOOST_TEST(values(w.grad()) == std::vector<float>({2, 2}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(inference_mode_is_no_grad) {
  static_assert(std::is_same_v<mg::autodiff::inference_mode, no_grad>);
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  {
    mg::autodiff::inference_mode guard;
    (void)mg::F::mul(w, 3.0);
  }
  BOOST_TEST(tape_size(gm) == 0u);
}

BOOST_AUTO_TEST_CASE(backward_inside_no_grad_still_computes_gradients) {
  // The scope stops recording, not backpropagation of what was recorded.
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  auto y = mg::F::mul(w, 3.0);
  no_grad guard;
  gm.backward(y);
  BOOST_TEST(values(w.grad()) == std::vector<float>({3, 3}), tt::per_element());
  BOOST_TEST(!mg::autodiff::is_grad_enabled());  // backward's own pause is undone, ours stays
}
