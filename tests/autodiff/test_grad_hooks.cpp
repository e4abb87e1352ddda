// Gradient-ready callbacks and after-backward hooks: when and how often
// they run relative to the reverse walk, checked against an event log.
#include <boost/test/unit_test.hpp>

#include <stdexcept>

#include "hooks/op_hooks.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using mg::autodiff::GradManager;
namespace tt = boost::test_tools;

namespace {

mg::Tensor scalar(float v) { return mg::tensor({v}, {1}); }
float value(const mg::Tensor& t) { return t.to_vector<float>().at(0); }

// `x * w` recorded as one op whose backward writes "op <name>" to the log,
// so the log shows where in the reverse walk each callback ran.
mg::Tensor logged_mul(std::vector<std::string>& log, const std::string& name, const mg::Tensor& x,
                      const mg::Tensor& w) {
  mg::Tensor out;
  {
    mg::autodiff::NoRecordScope plain;
    out = mg::F::mul(x, w);
  }
  mg::autodiff::record(mg::OpKind::mul, {&x, &w}, out, [&] {
    return [&log, name, x, w](const mg::Tensor& g, mg::autodiff::InputGrads& gi) {
      log.push_back("op " + name);
      if (gi.needs(0)) gi.set(0, mg::F::mul(g, w));
      if (gi.needs(1)) gi.set(1, mg::F::mul(g, x));
    };
  });
  return out;
}

// A callback that logs "<name> <grad>" and passes the gradient on.
mg::autodiff::GradCallback logging(std::vector<std::string>& log, const std::string& name) {
  return [&log, name](const mg::Tensor&, const mg::Tensor& g) {
    log.push_back(name + " " + std::to_string(static_cast<int>(value(g))));
    return g;
  };
}

}  // namespace

BOOST_AUTO_TEST_CASE(callback_fires_once_after_the_last_use_and_before_later_ready_tensors) {
  // y = x * a * b * a * c * a: `a` is used by ops 1, 3 and 5, b by op 2,
  // c by op 4. Walking back: op5 (a not final), op4 -> c final, op3, op2 ->
  // b final, op1 -> a final with all three contributions.
  GradManager gm;
  auto a = scalar(2), b = scalar(3), c = scalar(5), x = scalar(7);
  std::vector<std::string> log;
  gm.attach(a, {logging(log, "a")});
  gm.attach(b, {logging(log, "b")});
  gm.attach(c, {logging(log, "c")});
  gm.register_after_backward_callback([&] {
    log.push_back("after");
    BOOST_TEST(!a.grad().defined());  // hooks run before .grad() changes
  });
  auto r = gm.record();
  auto h = logged_mul(log, "1", x, a);
  h = logged_mul(log, "2", h, b);
  h = logged_mul(log, "3", h, a);
  h = logged_mul(log, "4", h, c);
  auto y = logged_mul(log, "5", h, a);
  gm.backward(y);
  // dy/da = 3 x b c a^2 = 1260, dy/db = x c a^3 = 280, dy/dc = x b a^3 = 168
  const std::vector<std::string> want = {"op 5", "op 4", "c 168", "op 3", "op 2", "b 280", "op 1", "a 1260", "after"};
  BOOST_TEST(log == want, tt::per_element());
  BOOST_TEST(value(a.grad()) == 1260.f);
  BOOST_TEST(value(b.grad()) == 280.f);
  BOOST_TEST(value(c.grad()) == 168.f);
}

BOOST_AUTO_TEST_CASE(chained_callbacks_of_one_tensor_run_in_attach_order_at_its_ready_time) {
  GradManager gm;
  auto w = scalar(3), x = scalar(2);
  std::vector<std::string> log;
  gm.attach(w, {logging(log, "first")});
  gm.attach(w, {[&](const mg::Tensor&, const mg::Tensor& g) {
    log.push_back("second " + std::to_string(static_cast<int>(value(g))));
    return mg::F::mul(g, 10.0);
  }});
  auto r = gm.record();
  auto y = logged_mul(log, "2", logged_mul(log, "1", x, w), w);  // x * w * w
  gm.backward(y);
  const std::vector<std::string> want = {"op 2", "op 1", "first 12", "second 12"};
  BOOST_TEST(log == want, tt::per_element());
  BOOST_TEST(value(w.grad()) == 120.f);  // the chain's result is what accumulates
}

BOOST_AUTO_TEST_CASE(a_tensor_used_only_by_the_last_op_is_ready_first_and_one_used_only_early_last) {
  GradManager gm;
  auto early = scalar(2), late = scalar(3), x = scalar(5);
  std::vector<std::string> log;
  gm.attach(early, {logging(log, "early")});
  gm.attach(late, {logging(log, "late")});
  auto r = gm.record();
  auto h = logged_mul(log, "1", x, early);
  h = logged_mul(log, "2", h, scalar(1));  // unattached operands: no callbacks
  auto y = logged_mul(log, "3", h, late);
  gm.backward(y);
  const std::vector<std::string> want = {"op 3", "late 10", "op 2", "op 1", "early 15"};
  BOOST_TEST(log == want, tt::per_element());
}

BOOST_AUTO_TEST_CASE(unused_attached_tensors_get_no_call_and_hooks_still_run) {
  GradManager gm;
  auto w = scalar(2), unused = scalar(4);
  int w_calls = 0, unused_calls = 0, hook_calls = 0;
  gm.attach(w, {[&](const mg::Tensor&, const mg::Tensor& g) { ++w_calls; return g; }});
  gm.attach(unused, {[&](const mg::Tensor&, const mg::Tensor& g) { ++unused_calls; return g; }});
  gm.register_after_backward_callback([&] { ++hook_calls; });
  {
    auto r = gm.record();
    gm.backward(mg::F::mul(w, 3.0));
  }
  BOOST_TEST(w_calls == 1);
  BOOST_TEST(unused_calls == 0);
  BOOST_TEST(!unused.grad().defined());
  BOOST_TEST(hook_calls == 1);
  {
    auto r = gm.record();
    gm.backward(scalar(1));  // nothing tracked reaches y: no callbacks, one hook call
  }
  BOOST_TEST(w_calls == 1);
  BOOST_TEST(hook_calls == 2);
  BOOST_TEST(value(w.grad()) == 3.f);
}

BOOST_AUTO_TEST_CASE(an_attached_output_with_no_op_after_it_is_ready_before_the_walk) {
  GradManager gm;
  auto w = scalar(2);
  std::vector<std::string> log;
  gm.attach(w, {logging(log, "w")});
  auto r = gm.record();
  auto h = logged_mul(log, "1", w, scalar(3));
  gm.attach(h, {logging(log, "h")});  // an intermediate, attached while recording
  gm.backward({h, w}, {scalar(1), scalar(5)});
  const std::vector<std::string> want = {"h 1", "op 1", "w 8"};
  BOOST_TEST(log == want, tt::per_element());
  BOOST_TEST(value(h.grad()) == 1.f);
  BOOST_TEST(value(w.grad()) == 8.f);  // 5 from the seed + 3 through op 1
}

BOOST_AUTO_TEST_CASE(after_backward_hooks_run_once_per_backward_in_registration_order) {
  GradManager gm;
  auto w = scalar(2);
  std::vector<std::string> log;
  gm.attach(w, {logging(log, "w")});
  BOOST_TEST(&gm.register_after_backward_callback([&] { log.push_back("h1"); }) == &gm);
  gm.register_after_backward_callback([&] { log.push_back("h2"); });
  for (int step = 0; step < 3; ++step) {
    auto r = gm.record();
    gm.backward(mg::F::mul(w, 4.0));
  }
  const std::vector<std::string> want = {"w 4", "h1", "h2", "w 4", "h1", "h2", "w 4", "h1", "h2"};
  BOOST_TEST(log == want, tt::per_element());
  BOOST_TEST(value(w.grad()) == 12.f);
  BOOST_CHECK_THROW(gm.register_after_backward_callback({}), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(no_hook_runs_when_backward_is_refused) {
  GradManager gm;
  int hook_calls = 0;
  gm.register_after_backward_callback([&] { ++hook_calls; });
  BOOST_CHECK_THROW(gm.backward(scalar(1)), mg::StateError);  // not recording
  BOOST_TEST(hook_calls == 0);
}

BOOST_AUTO_TEST_CASE(grad_scaler_backward_runs_callbacks_on_scaled_grads_and_the_hook_once) {
  GradManager gm;
  mg::amp::GradScaler scaler(1024.0);
  auto w = scalar(2);
  std::vector<float> seen;
  int hook_calls = 0;
  gm.attach(w, {[&](const mg::Tensor&, const mg::Tensor& g) {
    seen.push_back(value(g));
    return g;
  }});
  gm.register_after_backward_callback([&] { ++hook_calls; });
  for (int step = 1; step <= 2; ++step) {
    auto r = gm.record();
    scaler.backward(gm, mg::F::mul(w, 3.0));
    BOOST_TEST(hook_calls == step);
    w.set_grad(mg::Tensor());
  }
  BOOST_TEST(seen == std::vector<float>({3 * 1024.f, 3 * 1024.f}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_throwing_callback_mid_walk_changes_no_grad_and_the_manager_stays_usable) {
  // a is ready first (its callback runs), then b's callback throws: the
  // exception passes through, no .grad() changes, no hook runs, the
  // recording has ended, and the next backward works as usual.
  GradManager gm;
  auto a = scalar(2), b = scalar(3), x = scalar(5);
  a.set_grad(scalar(100));
  std::vector<std::string> log;
  bool fail = true;
  gm.attach(a, {logging(log, "a")});
  gm.attach(b, {[&](const mg::Tensor&, const mg::Tensor& g) -> mg::Tensor {
    if (fail) throw std::runtime_error("boom");
    return g;
  }});
  gm.register_after_backward_callback([&] { log.push_back("after"); });
  {
    auto r = gm.record();
    auto y = logged_mul(log, "2", logged_mul(log, "1", x, b), a);  // x * b * a
    BOOST_CHECK_THROW(gm.backward(y), std::runtime_error);
    BOOST_TEST(!gm.is_recording());
  }
  const std::vector<std::string> want = {"op 2", "a 15", "op 1"};
  BOOST_TEST(log == want, tt::per_element());
  BOOST_TEST(value(a.grad()) == 100.f);
  BOOST_TEST(!b.grad().defined());

  fail = false;
  log.clear();
  {
    auto r = gm.record();
    gm.backward(logged_mul(log, "2", logged_mul(log, "1", x, b), a));
  }
  BOOST_TEST(value(a.grad()) == 115.f);
  BOOST_TEST(value(b.grad()) == 10.f);
  BOOST_TEST(log.back() == "after");
}

BOOST_AUTO_TEST_CASE(a_throwing_hook_changes_no_grad) {
  GradManager gm;
  auto w = scalar(2);
  gm.attach(w);
  gm.register_after_backward_callback([] { throw std::runtime_error("wait failed"); });
  auto r = gm.record();
  BOOST_CHECK_THROW(gm.backward(mg::F::mul(w, 3.0)), std::runtime_error);
  BOOST_TEST(!w.grad().defined());
  BOOST_TEST(!gm.is_recording());
}

BOOST_AUTO_TEST_CASE(progress_hooks_run_after_each_op_and_its_callbacks) {
  // y = x * b * a: walking back, op 2 (a final), op 1 (b final); the
  // progress hooks run after each op's step, its callbacks included, in
  // registration order, and not for an op no gradient reaches.
  GradManager gm;
  auto a = scalar(2), b = scalar(3), x = scalar(5);
  std::vector<std::string> log;
  gm.attach(a, {logging(log, "a")});
  gm.attach(b, {logging(log, "b")});
  BOOST_TEST(&gm.register_backward_progress_callback([&] { log.push_back("p1"); }) == &gm);
  gm.register_backward_progress_callback([&] { log.push_back("p2"); });
  gm.register_after_backward_callback([&] { log.push_back("after"); });
  {
    auto r = gm.record();
    auto side = logged_mul(log, "side", x, a);  // on the tape, but no gradient reaches it
    gm.backward(logged_mul(log, "2", logged_mul(log, "1", x, b), a));
  }
  const std::vector<std::string> want = {"op 2", "a 15", "p1", "p2", "op 1", "b 10", "p1", "p2", "after"};
  BOOST_TEST(log == want, tt::per_element());
  BOOST_CHECK_THROW(gm.register_backward_progress_callback({}), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(a_throwing_progress_hook_changes_no_grad) {
  GradManager gm;
  auto w = scalar(2);
  gm.attach(w);
  gm.register_backward_progress_callback([] { throw std::runtime_error("test failed"); });
  auto r = gm.record();
  BOOST_CHECK_THROW(gm.backward(mg::F::mul(w, 3.0)), std::runtime_error);
  BOOST_TEST(!w.grad().defined());
  BOOST_TEST(!gm.is_recording());
}
