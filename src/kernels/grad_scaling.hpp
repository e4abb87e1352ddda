// Element math of gradient scaling, shared by the CPU loops and (later) the
// CUDA kernels: the non-finite test, the in-place scale-and-check of one
// gradient element, the per-element terms of a gradient norm, and the one-
// element update of a dynamic loss scale (GradScaler::update).
//
//   kernels::ScaleCheck<float> op{kernels::applied_factor<float>(1.0 / 65536.0)};
//   bool bad = op(g[i]);                 // g[i] *= 2^-16; true if now inf / NaN
//   kernels::is_non_finite(half(x));     // exponent bits all ones
//
// Non-finite tests look at the exponent bits instead of comparing floats, so
// they are exact for every dtype, stay correct under -ffast-math and turn
// into integer vector compares in the loops.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cast.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// Exponent mask of each floating type: all ones means inf or NaN.
inline constexpr uint32_t kFloatExponent = 0x7f800000u;
inline constexpr uint64_t kDoubleExponent = 0x7ff0000000000000ull;
inline constexpr uint16_t kHalfExponent = 0x7c00u;
inline constexpr uint16_t kBfloat16Exponent = 0x7f80u;

MIXGRAD_HOST_DEVICE inline bool is_non_finite(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & kFloatExponent) == kFloatExponent;
}
MIXGRAD_HOST_DEVICE inline bool is_non_finite(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & kDoubleExponent) == kDoubleExponent;
}
MIXGRAD_HOST_DEVICE inline bool is_non_finite(half x) { return (x.bits & kHalfExponent) == kHalfExponent; }
MIXGRAD_HOST_DEVICE inline bool is_non_finite(bfloat16 x) {
  return (x.bits & kBfloat16Exponent) == kBfloat16Exponent;
}

/// NaN only (inf is not), by bits, for the max-norm's NaN propagation.
MIXGRAD_HOST_DEVICE inline bool is_nan(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7fffffffu) > kFloatExponent;
}
MIXGRAD_HOST_DEVICE inline bool is_nan(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7fffffffffffffffull) > kDoubleExponent;
}

/// The factor a scale is applied with: computed by the caller in double,
/// rounded once to the arithmetic type of T (float for float32 and the
/// 16-bit types, double for float64).
template <class T>
MIXGRAD_HOST_DEVICE inline compute_t<T> applied_factor(double factor) {
  return static_cast<compute_t<T>>(factor);
}

/// g <- g * factor in T's arithmetic type, rounded to T; returns true when
/// the stored value is inf or NaN (a non-finite input, or an overflow of the
/// product in T).
template <class T>
struct ScaleCheck {
  compute_t<T> factor;
  MIXGRAD_HOST_DEVICE bool operator()(T& g) const {
    const T r = cast<T>(cast<compute_t<T>>(g) * factor);
    g = r;
    return is_non_finite(r);
  }
};

/// True when g * factor, in T's arithmetic type and not rounded back to T,
/// is inf or NaN: the read-only check before an update that unscales inside
/// its own kernel (kernels::apply_update uses that unrounded product).
template <class T>
struct ProductCheck {
  compute_t<T> factor;
  MIXGRAD_HOST_DEVICE bool operator()(T g) const { return is_non_finite(cast<compute_t<T>>(g) * factor); }
};

/// dst <- src * factor, in dst's arithmetic type (scaling a given dy).
template <class From, class To>
struct ScaleCopy {
  compute_t<To> factor;
  MIXGRAD_HOST_DEVICE To operator()(From s) const { return cast<To>(cast<compute_t<To>>(s) * factor); }
};

/// One element's term of a p-norm, in double: |x * inv_divisor|^p. The
/// divisor (1, or the largest |x|) keeps the sum of terms from overflowing
/// or underflowing when the grads are huge or tiny.
struct NormTerm {
  double p;
  double inv_divisor;
  MIXGRAD_HOST_DEVICE double operator()(double x) const {
    const double a = std::fabs(x * inv_divisor);
    if (p == 2.0) return a * a;
    if (p == 1.0) return a;
    return std::pow(a, p);
  }
};

/// The dynamic loss scale's update, run where the scale lives (PyTorch's
/// `_amp_update_scale_`): after an overflow the scale is multiplied by
/// backoff_factor (clamped up to min_scale) and the growth count restarts;
/// after a clean step the count grows by one and, on reaching
/// growth_interval (> 0), the scale is multiplied by growth_factor (clamped
/// down to max_scale) and the count restarts. inv_scale is rewritten as
/// 1 / scale in double. The clamps keep the scale in the caller's validated
/// range even where a product leaves double's.
struct ScaleUpdate {
  double growth_factor, backoff_factor, min_scale, max_scale;
  int64_t growth_interval;
  MIXGRAD_HOST_DEVICE void operator()(double& scale, double& inv_scale, int64_t& tracker, bool found) const {
    if (found) {
      const double s = scale * backoff_factor;
      scale = s > min_scale ? s : min_scale;
      tracker = 0;
    } else if (++tracker >= growth_interval) {
      const double s = scale * growth_factor;
      scale = s < max_scale ? s : max_scale;
      tracker = 0;
    }
    inv_scale = 1.0 / scale;
  }
};

}  // namespace mixgrad::kernels
