// Element math of the binary, comparison and select ops, and the partial
// derivatives that are more than a product with the upstream gradient.
// `C` is the compute type (float for float16 / bfloat16 storage).
//
//   kernels::Pow<float> f;
//   float y = f(2.f, 3.f);                                    // 8
//   float da = kernels::PowGradBase<float>{}(1.f, 2.f, 3.f);   // 3 * 2^2
//
// Gradient functors take (g, self, other) or (g, self, y) as their comment
// says, where y is the forward output; the caller sums the result back to
// the input's shape when it was broadcast.
#pragma once

#include <cmath>

#include "kernels/element_inline.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

template <class C>
struct Add {
  static constexpr bool kIntegers = true;
  MIXGRAD_ELEMENT C operator()(C a, C b) const { return a + b; }
};

template <class C>
struct Sub {
  static constexpr bool kIntegers = true;
  MIXGRAD_ELEMENT C operator()(C a, C b) const { return a - b; }
};

template <class C>
struct Mul {
  static constexpr bool kIntegers = true;
  MIXGRAD_ELEMENT C operator()(C a, C b) const { return a * b; }
};

template <class C>
struct Div {
  static constexpr bool kIntegers = false;
  MIXGRAD_ELEMENT C operator()(C a, C b) const { return a / b; }
};

template <class C>
struct Pow {
  static constexpr bool kIntegers = false;
  MIXGRAD_ELEMENT C operator()(C a, C b) const { return std::pow(a, b); }
};

// NaN in either input gives NaN (as PyTorch's maximum / minimum).
template <class C>
struct Maximum {
  static constexpr bool kIntegers = true;
  MIXGRAD_ELEMENT C operator()(C a, C b) const { return ((a > b) | (a != a)) ? a : b; }
};

template <class C>
struct Minimum {
  static constexpr bool kIntegers = true;
  MIXGRAD_ELEMENT C operator()(C a, C b) const { return ((a < b) | (a != a)) ? a : b; }
};

// Comparisons: IEEE semantics (anything compared with NaN is false, except !=).
template <class C> struct Equal { MIXGRAD_ELEMENT bool operator()(C a, C b) const { return a == b; } };
template <class C> struct NotEqual { MIXGRAD_ELEMENT bool operator()(C a, C b) const { return a != b; } };
template <class C> struct Less { MIXGRAD_ELEMENT bool operator()(C a, C b) const { return a < b; } };
template <class C> struct LessEqual { MIXGRAD_ELEMENT bool operator()(C a, C b) const { return a <= b; } };
template <class C> struct Greater { MIXGRAD_ELEMENT bool operator()(C a, C b) const { return a > b; } };
template <class C> struct GreaterEqual { MIXGRAD_ELEMENT bool operator()(C a, C b) const { return a >= b; } };

/// cond ? a : b on the stored bits U (an unsigned integer of the element's
/// size: no arithmetic, so no conversion), as a mask blend without a branch.
template <class U>
struct Select {
  MIXGRAD_ELEMENT U operator()(bool cond, U a, U b) const {
    const U mask = static_cast<U>(U(0) - static_cast<U>(cond));
    return static_cast<U>((a & mask) | (b & static_cast<U>(~mask)));
  }
};

// ---- derivatives ----------------------------------------------------------

/// d(a / b)/db times g, from (g, b, y = a / b): -g y / b.
template <class C>
struct DivGradDivisor {
  MIXGRAD_ELEMENT C operator()(C g, C b, C y) const { return -g * y / b; }
};

/// d(a^b)/da times g, from (g, a, b): g b a^(b-1); 0 where b == 0.
template <class C>
struct PowGradBase {
  MIXGRAD_ELEMENT C operator()(C g, C a, C b) const { return b == C(0) ? C(0) : g * b * std::pow(a, b - C(1)); }
};

/// d(a^b)/db times g, from (g, a, y = a^b): g y log(a); 0 where y == 0.
template <class C>
struct PowGradExponent {
  MIXGRAD_ELEMENT C operator()(C g, C a, C y) const { return y == C(0) ? C(0) : g * y * std::log(a); }
};

/// Gradient of maximum for one side, from (g, self, other): all of g where
/// self wins, half of it on a tie.
template <class C>
struct MaximumGrad {
  MIXGRAD_ELEMENT C operator()(C g, C self, C other) const {
    const C half = C(0.5) * g;  // computed before the selects, so they vectorise
    const C share = self == other ? half : g;
    return self >= other ? share : C(0);
  }
};

template <class C>
struct MinimumGrad {
  MIXGRAD_ELEMENT C operator()(C g, C self, C other) const {
    const C half = C(0.5) * g;
    const C share = self == other ? half : g;
    return self <= other ? share : C(0);
  }
};

}  // namespace mixgrad::kernels
