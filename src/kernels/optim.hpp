// Optimizer update rules, one element at a time, in the compute type C
// (float for float32 / float16 / bfloat16 parameters, double for float64).
// Each returns the new parameter value and updates its state in place; the
// CPU backend runs them over contiguous runs and the CUDA backend will reuse
// them in its kernels. The scalars are precomputed per step on the host
// (bias corrections), so the per-element work is a few fused multiply-adds.
//
// Every backend applies a rule through apply_update below, which adds the
// two mixed-precision parts of a step to any rule: the gradient is
// multiplied by the step's inverse loss scale (a GradScaler's unscale fused
// into the update; 1 when the gradient is not scaled, which is exact), and
// a 16-bit parameter with a float32 master copy is updated on the master,
// whose rounding is written to the parameter in the same pass (apex's O2).
#pragma once

#include <cmath>

#include "kernels/cast.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// p <- p - lr * (g + wd * p).
template <class C>
struct SgdRule {
  C lr, weight_decay;
  MIXGRAD_HOST_DEVICE C operator()(C p, C g) const { return p - lr * (g + weight_decay * p); }
};

/// Heavy-ball momentum: buf <- g on the first step, else
/// momentum * buf + (1 - dampening) * g; the step is buf (or g + momentum *
/// buf with Nesterov), with g already including weight decay.
/// `one_minus_dampening` is computed in double on the host.
template <class C>
struct SgdMomentumRule {
  C lr, weight_decay, momentum, one_minus_dampening;
  bool nesterov, first_step;
  MIXGRAD_HOST_DEVICE C operator()(C p, C g, C& buf) const {
    g += weight_decay * p;
    buf = first_step ? g : momentum * buf + one_minus_dampening * g;
    const C d = nesterov ? g + momentum * buf : buf;
    return p - lr * d;
  }
};

/// Adam / AdamW, branch-free: p <- p * decay (decay = 1 - lr * wd for
/// AdamW, 1 for Adam), g <- g + l2 * p (l2 = wd for Adam, 0 for AdamW), then
/// the moment updates and p <- p - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
/// with step_size = lr / (1 - beta1^t), inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t).
/// The host computes every derived scalar (1 - beta, the bias corrections)
/// in double: float(1 - 0.999) is 1e-5 off in relative terms, enough to
/// drift visibly over a few steps.
template <class C>
struct AdamRule {
  C beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay, l2, step_size, inv_sqrt_bc2;
  MIXGRAD_HOST_DEVICE C operator()(C p, C g, C& m, C& v) const {
    using std::sqrt;
    g += l2 * p;
    p *= decay;
    m = beta1 * m + one_minus_beta1 * g;
    v = beta2 * v + one_minus_beta2 * g * g;
    return p - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps);
  }
};

/// Adam with AMSGrad: the denominator uses the running maximum of v.
template <class C>
struct AmsgradRule {
  AdamRule<C> a;
  MIXGRAD_HOST_DEVICE C operator()(C p, C g, C& m, C& v, C& v_max) const {
    using std::sqrt;
    g += a.l2 * p;
    p *= a.decay;
    m = a.beta1 * m + a.one_minus_beta1 * g;
    v = a.beta2 * v + a.one_minus_beta2 * g * g;
    v_max = v_max > v ? v_max : v;
    return p - a.step_size * m / (sqrt(v_max) * a.inv_sqrt_bc2 + a.eps);
  }
};

/// One element of an update: g' = g * inv_scale (in C, unrounded), then
/// p <- rule(p, g', state...) computed in C. With a master copy (`master`
/// non-null, a C value), the rule runs on *master instead of p, *master takes
/// the result and p its rounding to P, so the 16-bit parameter is always the
/// master rounded, and no separate cast pass is needed.
template <class C, class P, class G, class Rule, class... S>
MIXGRAD_HOST_DEVICE inline void apply_update(const Rule& rule, C inv_scale, P& p, C* master, const G& g, S&... state) {
  const C gs = cast<C>(g) * inv_scale;
  if (master) {
    *master = rule(*master, gs, state...);
    p = cast<P>(*master);
  } else {
    p = cast<P>(rule(cast<C>(p), gs, state...));
  }
}

}  // namespace mixgrad::kernels
