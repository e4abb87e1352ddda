// The effective-state queries (is_autocast_enabled, autocast_dtype), the
// disabled scope that ignores its dtypes, and autocast's weight-cast cache
// across a no_grad scope.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <thread>

#include "hooks/op_hooks.hpp"
#include "mixgrad/mixgrad.hpp"
#include "autocast_test_util.hpp"

namespace mg = mixgrad;
namespace amp = mixgrad::amp;
using mg::DType;

namespace {

using autocast_test::GlobalsGuard;
using autocast_test::param;

}  // namespace

BOOST_AUTO_TEST_CASE(disabled_scope_ignores_its_dtypes) {
  for (bool use_amp : {false, true}) {
    amp::autocast scope(use_amp, use_amp ? DType::bfloat16 : DType::float32);
    BOOST_TEST(amp::is_autocast_enabled() == use_amp);
    BOOST_TEST(amp::autocast_dtype() == DType::bfloat16);  // fp32 was ignored when off
    BOOST_TEST(mg::F::matmul(param({2, 3}), param({3, 4})).dtype() == (use_amp ? DType::bfloat16 : DType::float32));
  }
  {
    amp::autocast off(false, DType::int32, DType::float16);  // nonsense, but unused: accepted
    BOOST_TEST(!amp::is_autocast_enabled());
    BOOST_TEST(off.config().low_prec_dtype == DType::bfloat16);
    BOOST_TEST(off.config().high_prec_dtype == DType::float32);
  }
  auto wrapped = amp::autocast(false, DType::float32).wrap([] { return amp::is_autocast_enabled(); });
  BOOST_TEST(!wrapped());
  // Enabled scopes still check.
  BOOST_CHECK_THROW(amp::autocast bad(true, DType::float32), mg::DTypeError);
  BOOST_TEST(!amp::is_autocast_enabled());
}

// Upstream: MegEngine test_autocast.py (ported in test_upstream_autocast.cpp).
BOOST_AUTO_TEST_CASE(is_autocast_enabled_follows_scope_then_global_default) {
  GlobalsGuard guard;
  BOOST_TEST(!amp::is_autocast_enabled());
  {
    amp::autocast scope(true, DType::float16);
    BOOST_TEST(amp::is_autocast_enabled());
    BOOST_TEST(!amp::enabled);  // the global default is not the effective state
    BOOST_TEST(amp::autocast_dtype() == DType::float16);
    {
      amp::autocast off(false);
      BOOST_TEST(!amp::is_autocast_enabled());
    }
    BOOST_TEST(amp::is_autocast_enabled());
  }
  BOOST_TEST(!amp::is_autocast_enabled());
  amp::enabled = true;
  amp::low_prec_dtype = DType::float16;
  BOOST_TEST(amp::is_autocast_enabled());  // no scope: the global default applies
  BOOST_TEST(amp::autocast_dtype() == DType::float16);
  {
    amp::autocast off(false);
    BOOST_TEST(!amp::is_autocast_enabled());
    BOOST_TEST(amp::enabled);
  }
  {
    amp::autocast scope(true, DType::bfloat16);
    BOOST_TEST(amp::autocast_dtype() == DType::bfloat16);
  }
}

BOOST_AUTO_TEST_CASE(effective_state_is_per_thread) {
  amp::autocast scope(true, DType::float16);
  bool other_on = true;
  DType other_dtype = DType::float16;
  std::thread t([&] {
    other_on = amp::is_autocast_enabled();
    other_dtype = amp::autocast_dtype();
  });
  t.join();
  BOOST_TEST(!other_on);
  BOOST_TEST(other_dtype == DType::bfloat16);  // the global default
  BOOST_TEST(amp::is_autocast_enabled());
}

BOOST_AUTO_TEST_CASE(cast_cached_inside_no_grad_is_not_reused_after_it) {
  // The cast made inside no_grad is on no tape; reusing it once recording
  // resumes would silently cut the gradient to w.
  mg::autodiff::GradManager gm;
  auto w = param({3, 2});
  auto x = param({4, 3});
  gm.attach(w);
  amp::autocast scope;
  auto r = gm.record();
  {
    mg::autodiff::no_grad guard;
    (void)mg::F::matmul(x, w);  // cached, not recorded
  }
  auto y = mg::F::matmul(x, w);
  gm.backward(mg::F::sum(y));
  BOOST_TEST_REQUIRE(w.grad().defined());
  auto g = w.grad().to_vector<float>();
  for (int k = 0; k < 3; ++k) {
    float col = 0;
    for (int i = 0; i < 4; ++i) col += x.at<float>({i, k});
    BOOST_TEST(std::abs(g[k * 2] - col) < 0.05f * (1 + std::abs(col)));
    BOOST_TEST(std::abs(g[k * 2 + 1] - col) < 0.05f * (1 + std::abs(col)));
  }
}

BOOST_AUTO_TEST_CASE(recorded_cast_serves_inside_no_grad) {
  amp::detail::RoundedProducts rounded;  // products cast on any CPU (else float32 operands are read as they are)
  mg::autodiff::GradManager gm;
  auto w = param({3, 2});
  auto x = param({4, 3});
  gm.attach(w);
  amp::autocast scope;
  auto r = gm.record();
  auto y = mg::F::matmul(x, w);  // cast recorded and cached
  const auto before = amp::detail::weight_cache_stats();
  {
    mg::autodiff::no_grad guard;
    (void)mg::F::matmul(x, w);
  }
  const auto after = amp::detail::weight_cache_stats();
  BOOST_TEST(after.hits - before.hits == 1u);
  BOOST_TEST(after.misses == before.misses);
  gm.backward(mg::F::sum(y));
  BOOST_TEST(w.grad().defined());
}
