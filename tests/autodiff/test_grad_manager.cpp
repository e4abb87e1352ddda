// GradManager semantics, one test per behaviour the design promises.
#include <boost/test/unit_test.hpp>

#include <thread>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using mg::autodiff::GradManager;
namespace tt = boost::test_tools;

namespace {
mg::Tensor vec(std::initializer_list<float> v) { return mg::tensor(v, {static_cast<int64_t>(v.size())}); }
std::vector<float> values(const mg::Tensor& t) { return t.to_vector<float>(); }
}  // namespace

// Upstream: MegEngine test_grad_manager.py test_attached_tensors.
BOOST_AUTO_TEST_CASE(attach_is_chainable_ordered_and_deduplicated) {
  GradManager gm;
  auto a = vec({1}), b = vec({2}), c = vec({3});
  BOOST_TEST(&gm.attach({a, b}).attach(c) == &gm);
  gm.attach(a);  // again: not duplicated
  auto att = gm.attached_tensors();
  BOOST_TEST_REQUIRE(att.size() == 3u);
  BOOST_TEST(att[0].id() == a.id());
  BOOST_TEST(att[1].id() == b.id());
  BOOST_TEST(att[2].id() == c.id());
}

// Upstream: MegEngine test_grad_manager.py test_attach_invalid_tensor_dtype (also in test_upstream_grad_manager.cpp).
BOOST_AUTO_TEST_CASE(attach_rejects_non_floating_and_changes_nothing) {
  GradManager gm;
  auto f = vec({1});
  auto i = mg::arange(3);
  BOOST_CHECK_THROW(gm.attach({f, i}), mg::DTypeError);
  BOOST_TEST(gm.attached_tensors().empty());  // f was not attached either
  try {
    gm.attach(i);
  } catch (const mg::DTypeError& e) {
    BOOST_TEST(std::string(e.what()).find("int64") != std::string::npos);
  }
}

// Upstream: MegEngine test_grad_manager.py test_attach_temporary (the weak hold; the callback in test_upstream_grad_manager.cpp).
BOOST_AUTO_TEST_CASE(attached_tensors_are_held_weakly) {
  GradManager gm;
  auto keep = vec({1});
  {
    auto temp = vec({2});
    gm.attach({keep, temp});
    BOOST_TEST(gm.attached_tensors().size() == 2u);
  }
  auto att = gm.attached_tensors();
  BOOST_TEST_REQUIRE(att.size() == 1u);
  BOOST_TEST(att[0].id() == keep.id());
}

BOOST_AUTO_TEST_CASE(record_twice_throws_and_release_is_idempotent) {
  GradManager gm;
  auto r = gm.record();
  BOOST_TEST(gm.is_recording());
  BOOST_CHECK_THROW((void)gm.record(), mg::StateError);
  try {
    (void)gm.record();
  } catch (const mg::StateError& e) {
    BOOST_TEST(std::string(e.what()).find("already recording") != std::string::npos);
  }
  gm.release();
  gm.release();
  BOOST_TEST(!gm.is_recording());
}

BOOST_AUTO_TEST_CASE(recording_scope_ends_recording) {
  GradManager gm;
  {
    auto r = gm.record();
    BOOST_TEST(gm.is_recording());
  }
  BOOST_TEST(!gm.is_recording());
}

BOOST_AUTO_TEST_CASE(backward_without_recording_says_to_call_record) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  try {
    gm.backward(mg::F::sum_to(w, {1}));
    BOOST_FAIL("expected StateError");
  } catch (const mg::StateError& e) {
    BOOST_TEST(std::string(e.what()).find("record()") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(backward_computes_and_releases) {
  GradManager gm;
  auto w = vec({1, 2, 3});
  gm.attach(w);
  auto r = gm.record();
  auto y = mg::F::sum_to(mg::F::mul(w, w), {1});  // sum w^2
  gm.backward(y);
  BOOST_TEST(!gm.is_recording());
  BOOST_TEST(values(w.grad()) == std::vector<float>({2, 4, 6}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(grads_accumulate_across_backward_calls) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  for (int k = 0; k < 3; ++k) {
    auto r = gm.record();
    gm.backward(mg::F::sum_to(mg::F::mul(w, 3.0), {1}));
  }
  BOOST_TEST(values(w.grad()) == std::vector<float>({9, 9}), tt::per_element());
}

// Upstream: MegEngine test_grad_manager.py test_dy.
BOOST_AUTO_TEST_CASE(dy_scales_the_gradient_and_defaults_to_ones_for_non_scalar_y) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  {
    auto r = gm.record();
    gm.backward(mg::F::mul(w, 2.0));  // non-scalar y, dy = ones
  }
  BOOST_TEST(values(w.grad()) == std::vector<float>({2, 2}), tt::per_element());
  w.set_grad(mg::Tensor());
  {
    auto r = gm.record();
    gm.backward(mg::F::mul(w, 2.0), vec({10, 100}));
  }
  BOOST_TEST(values(w.grad()) == std::vector<float>({20, 200}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(mismatched_dy_throws_and_keeps_recording) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  auto y = mg::F::mul(w, 2.0);
  BOOST_CHECK_THROW(gm.backward(y, vec({1, 2, 3})), mg::ShapeError);
  BOOST_CHECK_THROW(gm.backward(std::vector<mg::Tensor>{y, y}, std::vector<mg::Tensor>{vec({1, 1})}), mg::ShapeError);
  BOOST_TEST(gm.is_recording());  // a throwing call changes nothing
  BOOST_TEST(!w.grad().defined());
  gm.backward(y);  // still usable
  BOOST_TEST(values(w.grad()) == std::vector<float>({2, 2}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(several_outputs_sum_their_gradients) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  auto y1 = mg::F::mul(w, 2.0);
  auto y2 = mg::F::mul(w, w);
  gm.backward({y1, y2}, {vec({1, 1}), vec({1, 10})});
  BOOST_TEST(values(w.grad()) == std::vector<float>({2 + 2, 2 + 40}), tt::per_element());
}

// Upstream: MegEngine test_grad_manager.py test_no_dependency.
BOOST_AUTO_TEST_CASE(tensor_without_path_keeps_empty_grad) {
  GradManager gm;
  auto w = vec({1}), unused = vec({5});
  gm.attach({w, unused});
  auto r = gm.record();
  gm.backward(mg::F::mul(w, 2.0));
  BOOST_TEST(w.grad().defined());
  BOOST_TEST(!unused.grad().defined());
}

BOOST_AUTO_TEST_CASE(unattached_inputs_are_not_tracked) {
  GradManager gm;
  auto w = vec({1, 2}), x = vec({3, 4});
  gm.attach(w);
  auto r = gm.record();
  gm.backward(mg::F::mul(w, x));
  BOOST_TEST(values(w.grad()) == std::vector<float>({3, 4}), tt::per_element());
  BOOST_TEST(!x.grad().defined());
}

// Upstream: MegEngine test_grad_manager.py test_attach_in_with_block.
BOOST_AUTO_TEST_CASE(tensor_attached_during_recording_is_tracked_from_then_on) {
  GradManager gm;
  auto w = vec({1, 2}), v = vec({3, 4});
  gm.attach(w);
  auto r = gm.record();
  auto before = mg::F::mul(v, 5.0);  // v not yet attached: not tracked
  gm.attach(v);
  auto after = mg::F::mul(v, 7.0);
  gm.backward(mg::F::add(mg::F::add(mg::F::mul(w, 1.0), before), after));
  BOOST_TEST(values(v.grad()) == std::vector<float>({7, 7}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(callbacks_chain_in_attach_order_once_per_tensor) {
  GradManager gm;
  auto a = vec({1}), b = vec({1});
  std::vector<std::string> log;
  auto tag = [&](std::string name, double factor) {
    return [&log, name, factor](const mg::Tensor&, const mg::Tensor& g) {
      log.push_back(name);
      return mg::F::mul(g, factor);
    };
  };
  gm.attach(b, {tag("b1", 10)});
  gm.attach(a, {tag("a1", 2)});
  gm.attach(b, {tag("b2", 3)});  // adds a callback, keeps b first
  auto r = gm.record();
  auto ya = mg::F::mul(a, 1.0);  // recorded first: a's gradient is final last
  auto yb = mg::F::mul(mg::F::mul(b, 1.0), 1.0);
  auto y = mg::F::add(ya, yb);
  y = mg::F::add(y, mg::F::mul(b, 1.0));  // b reaches y twice: still one callback call
  gm.backward(y);
  BOOST_TEST(log == std::vector<std::string>({"b1", "b2", "a1"}), tt::per_element());
  BOOST_TEST(values(a.grad())[0] == 2.f);
  BOOST_TEST(values(b.grad())[0] == 2.f * 10 * 3);
}

BOOST_AUTO_TEST_CASE(a_throwing_callback_leaves_all_grads_unchanged) {
  GradManager gm;
  auto a = vec({1}), b = vec({1});
  a.set_grad(vec({5}));
  gm.attach(a);
  gm.attach(b, {[](const mg::Tensor&, const mg::Tensor&) -> mg::Tensor { throw std::runtime_error("boom"); }});
  auto r = gm.record();
  BOOST_CHECK_THROW(gm.backward(mg::F::add(a, b)), std::runtime_error);
  BOOST_TEST(values(a.grad())[0] == 5.f);
  BOOST_TEST(!b.grad().defined());
}

BOOST_AUTO_TEST_CASE(managers_are_independent) {
  GradManager g1, g2;
  auto w1 = vec({1, 2}), w2 = vec({3, 4});
  g1.attach(w1);
  g2.attach(w2);
  auto r1 = g1.record();
  auto r2 = g2.record();
  auto y = mg::F::mul(w1, w2);
  g1.backward(y);
  BOOST_TEST(values(w1.grad()) == std::vector<float>({3, 4}), tt::per_element());
  BOOST_TEST(!w2.grad().defined());
  BOOST_TEST(g2.is_recording());
  g2.backward(y, vec({1, 10}));
  BOOST_TEST(values(w2.grad()) == std::vector<float>({1, 20}), tt::per_element());
  BOOST_TEST(values(w1.grad()) == std::vector<float>({3, 4}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(recording_is_per_thread) {
  GradManager gm;
  auto w = vec({1, 2});
  gm.attach(w);
  auto r = gm.record();
  std::thread other([&] { (void)mg::F::mul(w, 100.0); });  // not recorded: another thread
  other.join();
  gm.backward(mg::F::mul(w, 2.0));
  BOOST_TEST(values(w.grad()) == std::vector<float>({2, 2}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(float32_parameter_through_bfloat16_gets_float32_grad) {
  GradManager gm;
  auto w = vec({1.5f, -2.f});
  gm.attach(w);
  auto r = gm.record();
  auto y = mg::F::mul(w.to(mg::DType::bfloat16), 4.0);
  BOOST_TEST(y.dtype() == mg::DType::bfloat16);
  gm.backward(y);
  BOOST_TEST(w.grad().dtype() == mg::DType::float32);
  BOOST_TEST(values(w.grad()) == std::vector<float>({4, 4}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(saved_tensors_and_intermediate_grads_are_freed) {
  // A deep chain of 200 ops on 1 MiB tensors: the tape holds the saved
  // activations until backward; after backward they are all gone, and
  // during backward intermediate gradients do not pile up.
  constexpr int64_t kN = 1 << 18;  // 1 MiB of float32
  constexpr int kDepth = 200;
  GradManager gm;
  auto w = mg::full({kN}, 1.0);
  gm.attach(w);
  mg::empty_cache();
  const int64_t base = mg::allocated_bytes();
  {
    auto r = gm.record();
    mg::Tensor h = w;
    for (int i = 0; i < kDepth; ++i) h = mg::F::mul(h, h);  // saves both inputs
    mg::reset_peak_allocated_bytes();
    const int64_t after_forward = mg::allocated_bytes();
    BOOST_TEST(after_forward - base >= kDepth * kN * 4);  // activations held by the tape
    gm.backward(h);
    const int64_t peak = mg::peak_allocated_bytes();
    // backward adds a few gradient buffers at a time, never a second copy of the chain
    BOOST_TEST(peak - after_forward <= 8 * kN * 4);
  }
  // only w and its grad remain
  BOOST_TEST(mg::allocated_bytes() - base <= 2 * kN * 4 + 4096);
}

// narrow's backward hands the walk its gradient as a block of the input's
// (InputGrads::set_block): overlapping blocks, a block after a whole
// gradient and a whole gradient after blocks all add up, in any order.
BOOST_AUTO_TEST_CASE(narrowed_gradients_add_into_their_blocks) {
  const mg::Tensor x = mg::tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const mg::Tensor w = mg::tensor<float>({10, 20, 30, 40, 50, 60}, {2, 3});
  GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    const mg::Tensor a = mg::F::narrow(x, 1, 0, 2);           // columns 0-1
    const mg::Tensor b = mg::F::narrow(x, 1, 1, 2);           // columns 1-2, overlapping
    const mg::Tensor c = mg::F::narrow(mg::F::mul(x, w), 0, 1, 1);  // row 1 of x * w: a block of a whole-tensor op
    const mg::Tensor loss = mg::F::add(mg::F::add(mg::F::sum(mg::F::mul(a, 2.0)), mg::F::sum(mg::F::mul(b, 3.0))),
                                       mg::F::add(mg::F::sum(c), mg::F::sum(x)));
    gm.backward(loss);
  }
  // d/dx: 1 everywhere, +2 in columns 0-1, +3 in columns 1-2, + w in row 1.
  const std::vector<float> want{3, 6, 4, 3 + 40, 6 + 50, 4 + 60};
  BOOST_TEST(x.grad().to_vector<float>() == want, tt::per_element());
  // The gradient of x does not share storage with anything the walk made.
  BOOST_TEST(x.grad().is_contiguous());
}

// backward_count() counts the backwards begun (a throwing one included), and
// backward_scaling() is the loss-scale mark of the running backward's
// gradients inside it, an empty mark outside: what a hook that writes other
// tensors' gradients itself (the sharded optimizer) must know.
BOOST_AUTO_TEST_CASE(backward_count_and_scaling_are_seen_by_the_hooks_of_the_running_backward) {
  GradManager gm;
  mg::Tensor w = vec({1, 2});
  gm.attach(w);
  BOOST_TEST(gm.backward_count() == 0u);
  std::vector<uint64_t> counts;
  std::vector<mg::ScaleState> states;
  std::vector<const void*> scalers;
  bool fail = false;
  gm.register_backward_progress_callback([&] {
    counts.push_back(gm.backward_count());
    const mg::GradScaling s = gm.backward_scaling();
    states.push_back(s.state);
    scalers.push_back(s.scaled_by);
    if (fail) throw mg::ValueError("a hook that throws");
  });
  auto step = [&](mg::amp::GradScaler* scaler) {
    auto rec = gm.record();
    const mg::Tensor loss = mg::F::sum(mg::F::mul(w, w));
    if (scaler) scaler->backward(gm, loss);
    else gm.backward(loss);
  };
  step(nullptr);
  BOOST_TEST(gm.backward_count() == 1u);
  BOOST_TEST_REQUIRE(!counts.empty());
  BOOST_TEST(counts.back() == 1u);
  BOOST_TEST((states.back() == mg::ScaleState::none));
  mg::amp::GradScaler scaler;
  w.set_grad(mg::Tensor());  // the scaler adds only to its own gradients
  step(&scaler);
  BOOST_TEST(counts.back() == 2u);
  BOOST_TEST((states.back() == mg::ScaleState::scaled));
  BOOST_TEST(scalers.back() == static_cast<const void*>(&scaler));
  BOOST_TEST((gm.backward_scaling().state == mg::ScaleState::none));  // outside a backward
  fail = true;
  BOOST_CHECK_THROW(step(nullptr), mg::ValueError);
  BOOST_TEST(gm.backward_count() == 3u);  // begun, though it ended by a throw
  BOOST_TEST((gm.backward_scaling().state == mg::ScaleState::none));
}
