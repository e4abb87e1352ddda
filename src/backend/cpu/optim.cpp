// CPU optimizer updates: the kernels/optim.hpp rules run over the innermost
// contiguous runs of (param, grad, state...) with for_each_run, which also
// splits large tensors across the OpenMP threads. A low-precision parameter
// or gradient is widened to the compute type per element, so no float copy
// of the gradient is ever made; a GradScaler's unscale and a master copy's
// write-back happen in the same pass (kernels::apply_update).
#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "backend/copy.hpp"
#include "backend/cpu/isa_variants.hpp"
#include "backend/optim.hpp"
#include "backend/optim_rules.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"
#include "kernels/optim.hpp"

namespace mixgrad::backend::cpu {

namespace {

using optim_rules::state_t;
using optim_rules::visit_param_grad;

// The contiguous loop, compiled portable and inside an AVX-512 target
// function picked at run time (core/simd.hpp): the updates are a handful of
// multiply-adds (a square root and a division for Adam) per element, which
// at the baseline's 4 lanes cost about as much as the memory traffic.
// kMaster: the parameter has a float32 master copy `m` (kernels::apply_update).
//
// 16-bit parameters and gradients go through small float blocks in L1 with
// the bulk converters (core/half.cpp), as the unscale pass does: the
// per-element bfloat16 / float16 rounding does not vectorise and costs more
// than the update itself. The rounding is the same.
template <class T>
constexpr bool kNarrow = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

template <bool kMaster, class P, class G, class C, size_t K, class Rule, size_t... I>
[[gnu::always_inline]] inline void rule_loop(const Rule& rule, C inv_scale, P* __restrict p, C* __restrict m,
                                             const G* __restrict g, const std::array<C*, K>& s, int64_t n,
                                             std::index_sequence<I...>) {
  if constexpr ((kNarrow<P> || kNarrow<G>) && std::is_same_v<C, float>) {
    constexpr int64_t kBlock = 512;
    alignas(64) float gb[kBlock];
    alignas(64) float pb[kBlock];
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t k = std::min(kBlock, n - b);
      const float* __restrict gs = gb;
      if constexpr (kNarrow<G>) convert(g + b, gb, k);
      else if constexpr (std::is_same_v<G, float>) gs = g + b;
      else for (int64_t i = 0; i < k; ++i) gb[i] = kernels::cast<float>(g[b + i]);
      float* __restrict x = pb;
      if constexpr (kMaster) x = m + b;
      else if constexpr (kNarrow<P>) convert(p + b, pb, k);
      else if constexpr (std::is_same_v<P, float>) x = p + b;
      else for (int64_t i = 0; i < k; ++i) pb[i] = kernels::cast<float>(p[b + i]);
      for (int64_t i = 0; i < k; ++i) x[i] = rule(x[i], gs[i] * inv_scale, s[I][b + i]...);
      if constexpr (kNarrow<P>) convert(x, p + b, k);
      else if constexpr (!std::is_same_v<P, float>) for (int64_t i = 0; i < k; ++i) p[b + i] = kernels::cast<P>(x[i]);
    }
  } else if constexpr (kMaster) {
    for (int64_t i = 0; i < n; ++i) kernels::apply_update(rule, inv_scale, p[i], &m[i], g[i], s[I][i]...);
  } else {
    for (int64_t i = 0; i < n; ++i) kernels::apply_update(rule, inv_scale, p[i], static_cast<C*>(nullptr), g[i], s[I][i]...);
  }
}

/// rule_loop as a kernel of isa_variants.hpp: compiled at each level.
template <bool kMaster, class P, class G, class C, size_t K>
struct RuleLoop {
  template <int Bytes, class Rule>
  [[gnu::always_inline]] void operator()(const Rule& rule, C inv_scale, P* p, C* m, const G* g,
                                         const std::array<C*, K>& s, int64_t n) const {
    rule_loop<kMaster, P, G, C, K>(rule, inv_scale, p, m, g, s, n, std::make_index_sequence<K>());
  }
};

// Runs `rule` over (param, [master,] grad, state...): the master copy takes
// the place of one more state tensor in the strided walk.
template <bool kMaster, class P, class G, class C, size_t K, class Rule, size_t... I>
void run_rule_impl(const Tensor& param, const Tensor& master, const Tensor& grad, const std::array<Tensor, K>& state,
                   const Rule& rule, C inv_scale, std::index_sequence<I...>) {
  constexpr int M = kMaster ? 1 : 0;
  constexpr int N = 2 + M + static_cast<int>(K);
  using Loop = RuleLoop<kMaster, P, G, C, K>;
  const auto contiguous_loop =
      isa::variant<Loop, const Rule&, C, P*, C*, const G*, const std::array<C*, K>&, int64_t>();
  std::array<Shape, N> strides;
  std::array<char*, N> base;
  strides[0] = byte_strides(param);
  base[0] = static_cast<char*>(param.raw_data());
  if constexpr (kMaster) {
    strides[1] = byte_strides(master);
    base[1] = static_cast<char*>(master.raw_data());
  }
  strides[1 + M] = byte_strides(grad);
  base[1 + M] = static_cast<char*>(grad.raw_data());
  ((strides[2 + M + I] = byte_strides(state[I]), base[2 + M + I] = static_cast<char*>(state[I].raw_data())), ...);
  kernels::for_each_run<N>(
      param.shape(), strides, base,
      [&rule, inv_scale, contiguous_loop](std::array<char*, N> ptr, const std::array<int64_t, N>& st, int64_t n) {
        P* __restrict p = reinterpret_cast<P*>(ptr[0]);
        C* __restrict m = kMaster ? reinterpret_cast<C*>(ptr[1]) : nullptr;
        const G* __restrict g = reinterpret_cast<const G*>(ptr[1 + M]);
        const std::array<C*, K> s{reinterpret_cast<C*>(ptr[2 + M + I])...};
        const bool contiguous = st[0] == sizeof(P) && (!kMaster || st[1] == sizeof(C)) && st[1 + M] == sizeof(G) &&
                                ((st[2 + M + I] == sizeof(C)) && ...);
        if (contiguous) {
          contiguous_loop(Loop{}, rule, inv_scale, p, m, g, s, n);
        } else {
          for (int64_t i = 0; i < n; ++i)
            kernels::apply_update(rule, inv_scale, *reinterpret_cast<P*>(ptr[0] + i * st[0]),
                                  kMaster ? reinterpret_cast<C*>(ptr[1] + i * st[1]) : static_cast<C*>(nullptr),
                                  *reinterpret_cast<const G*>(ptr[1 + M] + i * st[1 + M]),
                                  *reinterpret_cast<C*>(ptr[2 + M + I] + i * st[2 + M + I])...);
        }
      });
}

template <class P, class G, class C, size_t K, class Rule>
void run_rule(const Tensor& param, const Tensor& grad, const std::array<Tensor, K>& state, const Rule& rule,
              const UpdateOperands& amp) {
  // The factor is rounded once to C, as the separate unscale pass applies it.
  const C inv_scale = amp.inv_scale.defined() ? C(*static_cast<const double*>(amp.inv_scale.raw_data())) : C(1);
  if constexpr (std::is_same_v<P, half> || std::is_same_v<P, bfloat16>) {
    if (amp.master.defined()) {
      run_rule_impl<true, P, G, C, K>(param, amp.master, grad, state, rule, inv_scale, std::make_index_sequence<K>());
      return;
    }
  }
  run_rule_impl<false, P, G, C, K>(param, Tensor(), grad, state, rule, inv_scale, std::make_index_sequence<K>());
}

// True when the step's found-inf flag is set: the update is skipped.
bool skipped(const Tensor& found_inf) {
  return found_inf.defined() && *static_cast<const float*>(found_inf.raw_data()) != 0.0f;
}

// The step's hyper-parameters with the lr read from `lr` when it is defined.
template <class Step>
Step with_lr(Step s, const Tensor& lr) {
  if (lr.defined()) s.lr = *static_cast<const double*>(lr.raw_data());
  return s;
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& step,
                const Tensor& found_inf, const SgdStep& step_options, const UpdateOperands& amp) {
  if (skipped(found_inf)) return;
  const SgdStep s = with_lr(step_options, amp.lr);
  int64_t& count = *static_cast<int64_t*>(step.raw_data());
  const bool first_step = count == 0;
  visit_param_grad(param, grad, "sgd_update", [&]<class P, class G>() {
    using C = state_t<P>;
    if (!momentum_buffer.defined()) {
      const kernels::SgdRule<C> rule{C(s.lr), C(s.weight_decay)};
      run_rule<P, G, C, 0>(param, grad, {}, rule, amp);
      return;
    }
    const kernels::SgdMomentumRule<C> rule{C(s.lr), C(s.weight_decay), C(s.momentum), C(1.0 - s.dampening),
                                           s.nesterov, first_step};
    run_rule<P, G, C, 1>(param, grad, {momentum_buffer}, rule, amp);
  });
  ++count;
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const Tensor& step, const Tensor& found_inf,
                 const AdamStep& step_options, const UpdateOperands& amp) {
  if (skipped(found_inf)) return;
  const AdamStep s = with_lr(step_options, amp.lr);
  int64_t& count = *static_cast<int64_t*>(step.raw_data());
  visit_param_grad(param, grad, "adam_update", [&]<class P, class G>() {
    using C = state_t<P>;
    const kernels::AdamRule<C> adam = optim_rules::adam_rule<C>(s, count);
    if (max_exp_avg_sq.defined()) {
      run_rule<P, G, C, 3>(param, grad, {exp_avg, exp_avg_sq, max_exp_avg_sq}, kernels::AmsgradRule<C>{adam}, amp);
    } else {
      run_rule<P, G, C, 2>(param, grad, {exp_avg, exp_avg_sq}, adam, amp);
    }
  });
  ++count;
}

void advance_schedule(const Tensor& epoch, const Tensor& lrs, const Tensor& bases, const Tensor& found_inf,
                      const kernels::ScheduleProgram& program, bool advance) {
  int64_t& e = *static_cast<int64_t*>(epoch.raw_data());
  if (advance && !skipped(found_inf)) ++e;
  auto* lr = static_cast<double*>(lrs.raw_data());
  const auto* base = static_cast<const double*>(bases.raw_data());
  for (int64_t g = 0; g < lrs.numel(); ++g) lr[g * lrs.strides()[0]] = program.lr(e, base[g * bases.strides()[0]]);
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(sgd_update, cpu::sgd_update);
MIXGRAD_CPU_KERNEL(adam_update, cpu::adam_update);
MIXGRAD_CPU_KERNEL(advance_schedule, cpu::advance_schedule);

}  // namespace mixgrad::backend
