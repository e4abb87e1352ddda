// The checks LayerNorm and RMSNorm share: a normalised shape that is
// non-empty, positive and small enough to allocate, and an eps that is
// finite and >= 0. ValueError naming the module otherwise.
//
//   detail::check_normalized_shape("LayerNorm", shape);
//   detail::check_eps("LayerNorm", eps);
#pragma once

#include <cmath>
#include <string>

#include "core/sizes.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/shape.hpp"

namespace mixgrad::nn::detail {

inline void check_normalized_shape(const char* module, const Shape& shape) {
  bool ok = shape.ndim() > 0;
  for (int64_t d : shape) ok = ok && d >= 1;
  if (!ok)
    throw ValueError(std::string(module) + ": normalized_shape must be non-empty and positive, got " +
                     to_string(shape));
  sizes::nbytes(shape, DType::float32, module);
}

inline void check_eps(const char* module, double eps) {
  if (!(eps >= 0 && std::isfinite(eps)))
    throw ValueError(std::string(module) + ": eps must be finite and >= 0, got " + std::to_string(eps));
}

}  // namespace mixgrad::nn::detail
