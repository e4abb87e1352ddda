// The functions a unary op's derivative is written with (kernels/unary.hpp),
// for both value types it runs on: a scalar C (float, double, an integer) in
// the CPU and CUDA loops, and a Tensor in a recorded backward (create_graph),
// where each call is a recorded F:: op, so the derivative is differentiable
// again. Arithmetic and comparisons are the operators of either type.
//
//   template <class V> V grad(V g, V x) const { return g * math::exp(-x * x); }
//
// For a scalar each function is the plain expression and inlines into the
// kernel's loop as before. For any other V (Tensor) it calls
// math::TensorOps<V>, which ops/ (a layer above kernels) specialises.
#pragma once

#include <cmath>
#include <type_traits>

#include "kernels/fast_float.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::kernels::math {

/// The Tensor versions of the functions below (F:: ops), specialised in
/// ops/elementwise.cpp; only declared here.
template <class V>
struct TensorOps;

template <class V>
inline constexpr bool kScalar = std::is_arithmetic_v<V>;

/// cond ? a : b. Both arms are computed before the choice, which lets a
/// scalar loop compile to a vector blend; a Tensor takes F::where, whose
/// gradient flows to the chosen arm only. An arm may be a plain number.
template <class B, class A, class Z>
MIXGRAD_ELEMENT auto select(const B& cond, const A& a, const Z& b) {
  if constexpr (std::is_same_v<B, bool>) return cond ? a : b;
  else return TensorOps<B>::select(cond, a, b);
}

// exp, log, log1p, expm1, erf, tanh, sin and cos: float through its version
// in fast_float.hpp where there is one (a loop of it vectorises; one of
// libm's expf, logf or erff does not), other scalars through std::, a Tensor
// through the TensorOps function of the same name (defined for those a
// derivative uses). One pattern over eight names, which only a macro can
// take as a parameter.
#define MIXGRAD_MATH_FUNCTION(name, float_version)                   \
  template <class V>                                                 \
  MIXGRAD_ELEMENT V name(const V& x) {                           \
    if constexpr (std::is_same_v<V, float>) return float_version(x); \
    else if constexpr (kScalar<V>) return std::name(x);              \
    else return TensorOps<V>::name(x);                               \
  }
MIXGRAD_MATH_FUNCTION(exp, exp_float)
MIXGRAD_MATH_FUNCTION(log, log_float)
MIXGRAD_MATH_FUNCTION(log1p, log1p_float)
MIXGRAD_MATH_FUNCTION(expm1, expm1_float)
MIXGRAD_MATH_FUNCTION(erf, erf_float)
MIXGRAD_MATH_FUNCTION(tanh, tanh_float)
MIXGRAD_MATH_FUNCTION(sin, std::sin)
MIXGRAD_MATH_FUNCTION(cos, std::cos)
#undef MIXGRAD_MATH_FUNCTION

/// 1 / (1 + e^-x); float through sigmoid_float (vectorisable); a Tensor
/// takes F::sigmoid, whose derivative stays finite where e^-x overflows.
template <class V>
MIXGRAD_ELEMENT V sigmoid(const V& x) {
  if constexpr (std::is_same_v<V, float>) return sigmoid_float(x);
  else if constexpr (kScalar<V>) return V(1) / (V(1) + std::exp(-x));
  else return TensorOps<V>::sigmoid(x);
}

}  // namespace mixgrad::kernels::math
