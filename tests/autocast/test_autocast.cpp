// autocast as scope, wrapper and global switch; the policy table; the
// weight-cast cache.
#include <boost/test/unit_test.hpp>

#include <thread>

#include "hooks/op_hooks.hpp"
#include "mixgrad/mixgrad.hpp"
#include "autocast_test_util.hpp"

namespace mg = mixgrad;
namespace amp = mixgrad::amp;
using mg::DType;

namespace {

bool on() { return amp::current_state().enabled; }

using autocast_test::GlobalsGuard;
using autocast_test::param;

}  // namespace

BOOST_AUTO_TEST_CASE(scope_enables_and_restores_exactly) {
  BOOST_TEST(!on());
  {
    amp::autocast scope;
    BOOST_TEST(on());
    BOOST_TEST(amp::current_state().low_prec_dtype == DType::bfloat16);
    {
      amp::autocast inner(true, DType::float16);
      BOOST_TEST(amp::current_state().low_prec_dtype == DType::float16);
    }
    BOOST_TEST(amp::current_state().low_prec_dtype == DType::bfloat16);
  }
  BOOST_TEST(!on());
}

BOOST_AUTO_TEST_CASE(scope_restores_on_exception) {
  try {
    amp::autocast scope;
    throw std::runtime_error("leave");
  } catch (const std::runtime_error&) {
  }
  BOOST_TEST(!on());
}

BOOST_AUTO_TEST_CASE(disabled_scope_inside_enabled_region_disables) {
  amp::autocast scope;
  auto x = param({2, 3}), w = param({3, 4});
  {
    amp::autocast off(false);
    BOOST_TEST(!on());
    BOOST_TEST(mg::F::matmul(x, w).dtype() == DType::float32);
  }
  BOOST_TEST(on());
  BOOST_TEST(mg::F::matmul(x, w).dtype() == DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(invalid_dtypes_throw_and_change_nothing) {
  BOOST_CHECK_THROW(amp::autocast bad(true, DType::float32), mg::DTypeError);
  BOOST_CHECK_THROW(amp::autocast bad(true, DType::bfloat16, DType::float16), mg::DTypeError);
  BOOST_TEST(!on());
}

BOOST_AUTO_TEST_CASE(wrap_forwards_arguments_and_return_value) {
  auto f = amp::autocast().wrap([](const mg::Tensor& x, const mg::Tensor& w, int k) {
    BOOST_TEST(on());
    return std::make_pair(mg::F::matmul(x, w), k + 1);
  });
  BOOST_TEST(!on());  // building the wrapper leaves no state behind
  auto [y, k] = f(param({2, 3}), param({3, 4}), 41);
  BOOST_TEST(y.dtype() == DType::bfloat16);
  BOOST_TEST(k == 42);
  BOOST_TEST(!on());
}

BOOST_AUTO_TEST_CASE(wrap_is_recursion_and_nesting_safe) {
  std::function<int(int)> rec;
  auto wrapped = amp::autocast(true, DType::float16).wrap([&](int n) -> int {
    BOOST_TEST(on());
    BOOST_TEST(amp::current_state().low_prec_dtype == DType::float16);
    return n == 0 ? 0 : 1 + rec(n - 1);
  });
  rec = wrapped;
  BOOST_TEST(wrapped(5) == 5);
  BOOST_TEST(!on());
  auto off = amp::autocast(false).wrap([] { return on(); });
  amp::autocast scope;
  BOOST_TEST(!off());
  BOOST_TEST(on());
}

BOOST_AUTO_TEST_CASE(wrapper_restores_state_when_f_throws) {
  auto f = amp::autocast().wrap([](int) -> int { throw std::runtime_error("x"); });
  BOOST_CHECK_THROW(f(1), std::runtime_error);
  BOOST_TEST(!on());
}

BOOST_AUTO_TEST_CASE(global_switch_is_the_default_of_threads_without_scope) {
  GlobalsGuard guard;
  auto x = param({2, 3}), w = param({3, 4});
  amp::enabled = true;
  BOOST_TEST(mg::F::matmul(x, w).dtype() == DType::bfloat16);
  amp::low_prec_dtype = DType::float16;
  BOOST_TEST(mg::F::matmul(x, w).dtype() == DType::float16);
  bool other_thread_on = false;
  std::thread t([&] { other_thread_on = on(); });
  t.join();
  BOOST_TEST(other_thread_on);
  {
    amp::autocast off(false);  // a scope wins over the switch
    BOOST_TEST(mg::F::matmul(x, w).dtype() == DType::float32);
  }
  amp::enabled = false;
  BOOST_TEST(mg::F::matmul(x, w).dtype() == DType::float32);
}

BOOST_AUTO_TEST_CASE(scope_state_is_thread_local) {
  amp::autocast scope;
  bool seen = true;
  std::thread t([&] { seen = on(); });
  t.join();
  BOOST_TEST(!seen);
  BOOST_TEST(on());
}

BOOST_AUTO_TEST_CASE(policy_sets_output_dtypes) {
  amp::autocast scope;
  auto x = param({2, 3}), w = param({4, 3}), b = param({4});
  BOOST_TEST(mg::F::linear(x, w, b).dtype() == DType::bfloat16);
  BOOST_TEST(mg::F::matmul(param({2, 2, 3}), param({2, 3, 5})).dtype() == DType::bfloat16);
  BOOST_TEST(mg::F::conv2d(param({1, 2, 5, 5}), param({3, 2, 3, 3})).dtype() == DType::bfloat16);
  auto low = mg::F::matmul(x, mg::F::transpose(w, 0, 1));
  BOOST_TEST(mg::F::softmax(low, 1).dtype() == DType::float32);
  BOOST_TEST(mg::F::log_softmax(low, 1).dtype() == DType::float32);
  BOOST_TEST(mg::F::exp(low).dtype() == DType::float32);
  BOOST_TEST(mg::F::sum(low).dtype() == DType::float32);
  BOOST_TEST(mg::F::cross_entropy(low, mg::tensor<int64_t>({0, 3}, {2})).dtype() == DType::float32);
  BOOST_TEST(mg::F::relu(low).dtype() == DType::bfloat16);             // pass-through
  for (auto high : {&mg::F::tan, &mg::F::log1p, &mg::F::expm1}) BOOST_TEST(high(low).dtype() == DType::float32);
  BOOST_TEST(mg::F::softplus(low).dtype() == DType::float32);
  for (auto keep : {&mg::F::sin, &mg::F::cos, &mg::F::erf, &mg::F::hardswish, &mg::F::mish})
    BOOST_TEST(keep(low).dtype() == DType::bfloat16);
  {  // batch_norm: 16-bit in and out, float32 statistics and running stats
    auto feat = mg::F::conv2d(param({2, 2, 4, 4}), param({3, 2, 3, 3}));
    auto rm = mg::zeros({3}), rv = mg::ones({3});
    auto y = mg::F::batch_norm(feat, rm, rv, mg::ones({3}), mg::zeros({3}), {.training = true});
    BOOST_TEST(y.dtype() == DType::bfloat16);
    BOOST_TEST(rm.dtype() == DType::float32);
    // running mean moved by momentum * batch mean, computed in float32
    auto f32 = feat.to(DType::float32).to_vector<float>();
    double mean0 = 0;
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 4; ++k) mean0 += f32[n * 12 + k];
    BOOST_TEST(std::abs(rm.to_vector<float>()[0] - 0.1 * mean0 / 8) < 1e-5);
  }
  BOOST_TEST(mg::F::add(low, param({2, 4})).dtype() == DType::float32);  // promote to widest
  BOOST_TEST(mg::F::concat({low, param({1, 4})}, 0).dtype() == DType::float32);
  // float64 and integers are never cast
  auto x64 = mg::uniform({2, 3}, -1, 1, DType::float64);
  BOOST_TEST(mg::F::matmul(x64, mg::uniform({3, 2}, -1, 1, DType::float64)).dtype() == DType::float64);
  BOOST_TEST(mg::F::add(mg::arange(3), mg::arange(3)).dtype() == DType::int64);
}

BOOST_AUTO_TEST_CASE(float32_parameters_get_float32_gradients) {
  mg::autodiff::GradManager gm;
  auto x = param({4, 3}), w = param({5, 3}), b = param({5});
  gm.attach({w, b});
  {
    amp::autocast scope;
    auto r = gm.record();
    auto y = mg::F::linear(x, w, b);
    BOOST_TEST(y.dtype() == DType::bfloat16);
    gm.backward(mg::F::sum(y));
  }
  BOOST_TEST(w.grad().dtype() == DType::float32);
  BOOST_TEST(b.grad().dtype() == DType::float32);
  // d sum(x w^T + b) / d b = N for every output; in bf16 that is exact.
  for (float v : b.grad().to_vector<float>()) BOOST_TEST(v == 4.f);
}

// Upstream: PyTorch test_autocast.py TestAutocastGPU.test_cast_cache_is_global (the CPU analogue).
BOOST_AUTO_TEST_CASE(weight_cast_cache_casts_each_parameter_once_per_region) {
  amp::detail::RoundedProducts rounded;  // products cast on any CPU (else float32 operands are read as they are)
  mg::autodiff::GradManager gm;
  auto w = param({3, 3});
  auto x = param({2, 3});
  gm.attach(w);
  const auto before = amp::detail::weight_cache_stats();
  {
    amp::autocast scope;
    (void)mg::F::matmul(x, w);
    (void)mg::F::matmul(x, w);
    {
      amp::autocast nested;  // nested region shares the cache
      (void)mg::F::matmul(x, w);
    }
    (void)mg::F::matmul(x, w);
  }
  auto mid = amp::detail::weight_cache_stats();
  BOOST_TEST(mid.misses - before.misses == 1u);
  BOOST_TEST(mid.hits - before.hits == 3u);
  {
    amp::autocast scope;  // a new outermost region starts empty
    (void)mg::F::matmul(x, w);
  }
  auto after = amp::detail::weight_cache_stats();
  BOOST_TEST(after.misses - mid.misses == 1u);
  // x is not attached: cast on every use, never served from the cache
  const auto xs = x.reshape({3, 2});
  {
    amp::autocast scope;
    (void)mg::F::matmul(w, xs);
    (void)mg::F::matmul(w, xs);
  }
  auto last = amp::detail::weight_cache_stats();
  BOOST_TEST(last.misses - after.misses == 1u);  // w, once
  BOOST_TEST(last.hits - after.hits == 1u);      // w again; xs never
}

BOOST_AUTO_TEST_CASE(cache_is_invalidated_by_in_place_updates) {
  mg::autodiff::GradManager gm;
  auto w = param({2, 2});
  auto x = param({1, 2});
  gm.attach(w);
  amp::autocast scope;
  auto y1 = mg::F::matmul(x, w).to(DType::float32).to_vector<float>();
  w.data<float>()[0] += 1.0f;
  w.bump_version();
  auto y2 = mg::F::matmul(x, w).to(DType::float32).to_vector<float>();
  BOOST_TEST(std::abs((y2[0] - y1[0]) - x.at<float>({0, 0})) < 0.05f);
}

BOOST_AUTO_TEST_CASE(cast_cached_while_not_recording_is_not_reused_in_a_recording) {
  // The cast made outside the recording is on no tape; reusing it inside
  // would silently cut the gradient to w.
  mg::autodiff::GradManager gm;
  auto w = param({3, 2});
  auto x = param({4, 3});
  gm.attach(w);
  amp::autocast scope;
  (void)mg::F::matmul(x, w);  // cached, not recorded
  {
    auto r = gm.record();
    auto y = mg::F::matmul(x, w);
    gm.backward(mg::F::sum(y));
  }
  BOOST_TEST_REQUIRE(w.grad().defined());
  // d sum(x w) / d w[k][j] = sum_i x[i][k]
  auto g = w.grad().to_vector<float>();
  for (int k = 0; k < 3; ++k) {
    float col = 0;
    for (int i = 0; i < 4; ++i) col += x.at<float>({i, k});
    BOOST_TEST(std::abs(g[k * 2] - col) < 0.05f * (1 + std::abs(col)));
  }
}

// Upstream: PyTorch's torch.set_autocast_cache_enabled / is_autocast_cache_enabled.
BOOST_AUTO_TEST_CASE(cast_cache_switch_casts_every_use_while_off_and_counts_the_casts) {
  amp::detail::RoundedProducts rounded;  // products cast on any CPU
  BOOST_TEST(amp::is_autocast_cache_enabled());  // on by default
  mg::autodiff::GradManager gm;
  auto w = param({3, 3});
  auto x = param({2, 3});
  gm.attach(w);
  mg::Tensor y_on, y_off;
  const auto s0 = amp::detail::weight_cache_stats();
  {
    amp::autocast scope;
    const amp::detail::CastTally tally;
    y_on = mg::F::matmul(x, w);
    (void)mg::F::matmul(x, w);
    BOOST_TEST(tally.counts().casts == 3u);  // x twice (not attached), w once
    BOOST_TEST(tally.counts().elements == 6u + 6u + 9u);
  }
  const auto s1 = amp::detail::weight_cache_stats();
  BOOST_TEST(s1.misses - s0.misses == 1u);
  BOOST_TEST(s1.hits - s0.hits == 1u);
  amp::set_autocast_cache_enabled(false);
  BOOST_TEST(!amp::is_autocast_cache_enabled());
  bool other_thread_on = false;
  std::thread([&] { other_thread_on = amp::is_autocast_cache_enabled(); }).join();
  BOOST_TEST(other_thread_on);  // per thread, as PyTorch's
  {
    amp::autocast scope;
    const amp::detail::CastTally outer;
    {
      const amp::detail::CastTally tally;
      y_off = mg::F::matmul(x, w);
      (void)mg::F::matmul(x, w);
      BOOST_TEST(tally.counts().casts == 4u);  // w on every use now
    }
    BOOST_TEST(outer.counts().casts == 4u);  // an inner tally's casts reach the outer one
  }
  amp::set_autocast_cache_enabled(true);
  const auto s2 = amp::detail::weight_cache_stats();
  BOOST_TEST(s2.misses == s1.misses);  // off: the cache is neither read nor filled
  BOOST_TEST(s2.hits == s1.hits);
  BOOST_TEST(y_on.to(DType::float32).to_vector<float>() == y_off.to(DType::float32).to_vector<float>(),
             boost::test_tools::per_element());
  {
    const amp::detail::CastTally tally;
    (void)mg::F::matmul(x, w);  // no autocast: no cast
    BOOST_TEST(tally.counts().casts == 0u);
  }
}
