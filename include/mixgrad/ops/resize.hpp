// mixgrad/ops/resize.hpp — ops that change a tensor's spatial extent by
// padding or resampling, with PyTorch's F.pad and F.interpolate semantics.
//
//   F::pad(x, {1, 1});                                    // last dim: 1 before, 1 after, zeros
//   F::pad(x, {1, 1, 2, 2}, F::PadMode::reflect);         // last two dims, mirrored
//   F::pad(x, {2, 2}, F::PadMode::circular);              // last dim, wrapped around
//   F::interpolate(x, {.scale_factor = 2});               // nearest, [N, C, 2H, 2W]
//   F::interpolate(x, {.size = {7, 9}, .mode = F::InterpolateMode::bilinear, .align_corners = true});
//   F::interpolate(x, {.scale_factor = 2, .mode = F::InterpolateMode::bicubic});
#pragma once

#include <cstdint>
#include <vector>

#include "mixgrad/ops/options.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// What fills the padded border: a constant, the input mirrored about its
/// edge element (edge not repeated), the edge element repeated, or the
/// input wrapped around (the elements from the other end, as if periodic).
enum class PadMode : uint8_t { constant, reflect, replicate, circular };

/// Pads the trailing dims of x. `pads` holds (before, after) pairs starting
/// from the last dim and moving backwards, as PyTorch's F.pad: {l, r} pads
/// the last dim, {l, r, t, b} the last two. It must have an even length of
/// at most 2 * x.ndim(); every entry must be >= 0 (negative pads, which crop
/// in PyTorch, are refused: ShapeError). reflect needs each pad smaller than
/// its dim, replicate a non-empty dim, circular each pad at most its dim
/// (PyTorch's "wrapping around more than once" otherwise). `value` is used
/// by constant mode only. The gradient sums the output positions each input
/// element was copied to. circular is composed of narrow and concat, one
/// dim at a time (its recorded ops are theirs); the other modes are one
/// kernel each. Every mode keeps the input's dtype under autocast.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::constant, double value = 0.0);

enum class InterpolateMode : uint8_t { nearest, bilinear, bicubic };

/// A pair of scale factors (height, width); a number means the same for both.
struct Scale2 {
  double h = 0.0;
  double w = 0.0;
  constexpr Scale2() = default;
  constexpr Scale2(double v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor)
  constexpr Scale2(double h_, double w_) : h(h_), w(w_) {}
};

struct InterpolateOptions {
  Size2 size = 0;          // output (H, W); give either size or scale_factor
  Scale2 scale_factor = 0;  // output extent floor(in * scale); the kernel samples at 1 / scale
  InterpolateMode mode = InterpolateMode::nearest;
  bool align_corners = false;  // bilinear and bicubic only: corner pixels' centres line up
};

/// Resamples x [N, C, H, W] to [N, C, OH, OW], as PyTorch's F.interpolate:
/// nearest takes input row floor(o * scale) (scale = H / OH, or
/// 1 / scale_factor when given); bilinear interpolates between the two
/// nearest rows and columns, with source coordinate (o + 0.5) * scale - 0.5
/// clamped at 0, or o * (H - 1) / (OH - 1) with align_corners; bicubic is
/// F::upsample_bicubic2d (4 taps per axis, A = -0.75, the same source
/// coordinates without the clamp). Exactly one of size and scale_factor
/// must be given (ValueError otherwise), and align_corners with nearest is
/// a ValueError. Autocast runs it in float32 on the CPU (the op table's
/// upsample_nearest, upsample_bilinear and upsample_bicubic entries;
/// docs/amp.md says where PyTorch's CPU autocast differs).
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

/// The same as interpolate (PyTorch's F.upsample, MegEngine's F.vision.interpolate).
inline Tensor upsample(const Tensor& x, const InterpolateOptions& options) { return interpolate(x, options); }

}  // namespace mixgrad::F
