// Reduction combiners and the derivative math of the reductions.
//
// A reducer folds mapped elements into an accumulator of type `A`
// (acc_t<T>: float for float32 / float16 / bfloat16, double for float64,
// int64 for integers and bool) with an associative `combine`, so a loop may
// keep several partial accumulators (vector lanes, threads) and merge them:
//
//   kernels::SumReducer<float> r;
//   float acc = r.identity();
//   for (float v : values) acc = r.combine(acc, r.map(v, 0.f));
//
// `map(x, center)` receives a per-output center (the mean, for the second
// pass of var); reducers that do not need it ignore it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cast.hpp"

namespace mixgrad::kernels {

/// Accumulator type of reductions over T: int64 for integers and bool (a
/// sum of bools counts), else the type arithmetic on T is carried out in.
template <class T>
using acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, compute_t<T>>;

template <class A>
struct SumReducer {
  MIXGRAD_HOST_DEVICE static A identity() { return A(0); }
  MIXGRAD_HOST_DEVICE A map(A x, A) const { return x; }
  MIXGRAD_HOST_DEVICE static A combine(A a, A b) { return a + b; }
};

/// Sum of squares (2-norm).
template <class A>
struct SquareReducer {
  MIXGRAD_HOST_DEVICE static A identity() { return A(0); }
  MIXGRAD_HOST_DEVICE A map(A x, A) const { return x * x; }
  MIXGRAD_HOST_DEVICE static A combine(A a, A b) { return a + b; }
};

/// Sum of absolute values (1-norm).
template <class A>
struct AbsReducer {
  MIXGRAD_HOST_DEVICE static A identity() { return A(0); }
  MIXGRAD_HOST_DEVICE A map(A x, A) const { return x < A(0) ? -x : x; }
  MIXGRAD_HOST_DEVICE static A combine(A a, A b) { return a + b; }
};

/// Sum of |x|^p (p-norm).
template <class A>
struct AbsPowReducer {
  A p;
  MIXGRAD_HOST_DEVICE static A identity() { return A(0); }
  MIXGRAD_HOST_DEVICE A map(A x, A) const { return std::pow(x < A(0) ? -x : x, p); }
  MIXGRAD_HOST_DEVICE static A combine(A a, A b) { return a + b; }
};

/// Sum of (x - center)^2 (second pass of var).
template <class A>
struct SquaredDeviationReducer {
  MIXGRAD_HOST_DEVICE static A identity() { return A(0); }
  MIXGRAD_HOST_DEVICE A map(A x, A center) const { return (x - center) * (x - center); }
  MIXGRAD_HOST_DEVICE static A combine(A a, A b) { return a + b; }
};

template <class A>
MIXGRAD_HOST_DEVICE A lowest_value() {
  if constexpr (std::numeric_limits<A>::has_infinity) return -std::numeric_limits<A>::infinity();
  else return std::numeric_limits<A>::lowest();
}

template <class A>
MIXGRAD_HOST_DEVICE A highest_value() {
  if constexpr (std::numeric_limits<A>::has_infinity) return std::numeric_limits<A>::infinity();
  else return std::numeric_limits<A>::max();
}

/// Largest element; a NaN anywhere makes the result NaN. (The bitwise `|`
/// keeps the select branch-free, so lane loops vectorise.)
template <class A>
struct MaxReducer {
  MIXGRAD_HOST_DEVICE static A identity() { return lowest_value<A>(); }
  MIXGRAD_HOST_DEVICE A map(A x, A) const { return x; }
  MIXGRAD_HOST_DEVICE static A combine(A a, A b) { return ((a > b) | (a != a)) ? a : b; }
};

template <class A>
struct MinReducer {
  MIXGRAD_HOST_DEVICE static A identity() { return highest_value<A>(); }
  MIXGRAD_HOST_DEVICE A map(A x, A) const { return x; }
  MIXGRAD_HOST_DEVICE static A combine(A a, A b) { return ((a < b) | (a != a)) ? a : b; }
};

/// Largest |x| (infinity-norm).
template <class A>
struct MaxAbsReducer {
  MIXGRAD_HOST_DEVICE static A identity() { return A(0); }
  MIXGRAD_HOST_DEVICE A map(A x, A) const { return x < A(0) ? -x : x; }
  MIXGRAD_HOST_DEVICE static A combine(A a, A b) { return ((a > b) | (a != a)) ? a : b; }
};

// ---- derivatives ----------------------------------------------------------

/// d var / dx times g, from (g, x, mean): g * scale * (x - mean) with
/// scale = 2 / (n - correction).
template <class C>
struct VarGrad {
  C scale;
  MIXGRAD_HOST_DEVICE C operator()(C g, C x, C mean) const { return g * scale * (x - mean); }
};

/// d ||x||_p / dx times g, from (g, x, norm): g sign(x) (|x| / norm)^(p-1);
/// 0 where the norm is 0. For p = inf the gradient goes to every element
/// whose |x| equals the norm.
template <class C>
struct NormGrad {
  C p;
  MIXGRAD_HOST_DEVICE C operator()(C g, C x, C norm) const {
    if (norm == C(0)) return C(0);
    const C sign = x > C(0) ? C(1) : (x < C(0) ? C(-1) : C(0));
    const C ax = x < C(0) ? -x : x;
    if (p == C(2)) return g * x / norm;
    if (p == C(1)) return g * sign;
    if (std::isinf(p)) return ax == norm ? g * sign : C(0);
    return g * sign * std::pow(ax / norm, p - C(1));
  }
};

}  // namespace mixgrad::kernels
