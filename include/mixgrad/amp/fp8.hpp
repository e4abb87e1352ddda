// mixgrad/amp/fp8.hpp — FP8 training with delayed scaling (Transformer
// Engine's DelayedScaling recipe). On a GPU with FP8 GEMMs
// (cuda::fp8_gemm_available: compute capability 8.9+), linear products whose
// extents are multiples of 16 run cuBLASLt's FP8 GEMMs; everywhere else they
// are emulated: float32 products on values rounded to FP8, the numerics of
// FP8 training without its speed. docs/fp8.md.
//
//   mg::amp::Fp8Scaler fp8({.amax_history_len = 16, .margin = 0});
//   for (...) {
//     auto rec = gm.record();
//     mg::Tensor loss;
//     {
//       mg::amp::autocast bf16;              // optional: bf16 outputs
//       mg::amp::fp8_autocast region(fp8);   // F::linear / F::matmul in FP8
//       loss = F::mse_loss(net(x), y);
//     }
//     gm.backward(loss);                     // gradients quantized to E5M2
//     opt.step().clear_grad();
//     fp8.update();                          // new scales from the amax histories
//   }
//
// Inside a region, each F::linear and F::matmul is one "site", numbered in
// call order from the region's start; run the same sequence of products
// every step (a site that changes kind throws StateError naming it). A site
// quantizes its two operands to E4M3 with their scales (delayed: the scales
// of earlier steps), records their amaxes, multiplies in float32 and divides
// by the scales; its backward records the gradient's amax and quantizes the
// gradient to E5M2 (HYBRID) or E4M3. Gradients are straight-through. The
// scales and histories are float32 tensors on the inputs' device, updated by
// tensor ops: no step reads them on the host.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mixgrad/ops/fp8.hpp"
#include "mixgrad/state_dict.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::amp {

/// Delayed scaling, as Transformer Engine's DelayedScaling.
struct Fp8Recipe {
  /// HYBRID: E4M3 forward, E5M2 gradients. E4M3: E4M3 everywhere.
  enum class Format { hybrid, e4m3 };
  /// How the history becomes the amax of the next scale: its maximum, or
  /// the latest step's amax.
  enum class AmaxCompute { max, most_recent };

  /// Steps of amax history kept per tensor (>= 1).
  int64_t amax_history_len = 1024;
  /// scale = (fp8_max / amax) / 2^margin (margin in [0, 126]).
  int64_t margin = 0;
  AmaxCompute amax_compute_algo = AmaxCompute::max;
  Format fp8_format = Format::hybrid;
};

/// The FP8 scales and amax histories of the products in fp8_autocast regions
/// (a GradScaler-style object). Per site: a float32 `scale` of shape [3] and
/// an `amax_history` of shape [amax_history_len, 3], columns (first operand,
/// second operand or weight, gradient); row 0 collects the current step.
/// One training thread per scaler (its sites are not locked).
class Fp8Scaler {
 public:
  /// ValueError naming "Fp8Scaler" for amax_history_len < 1 or a margin
  /// outside [0, 126].
  explicit Fp8Scaler(Fp8Recipe recipe = {});
  ~Fp8Scaler();
  Fp8Scaler(const Fp8Scaler&) = delete;
  Fp8Scaler& operator=(const Fp8Scaler&) = delete;

  const Fp8Recipe& recipe() const { return recipe_; }

  /// After each step's backward: passes the current amaxes to the amax
  /// reduction (if set), sets each scale to (fp8_max / amax) / 2^margin where
  /// the amax from the history is finite and > 0 (else keeps it; an infinite
  /// scale becomes float32's largest), then rolls the histories by one and
  /// zeroes row 0. Tensor ops only: no host read.
  void update();

  /// Called by update() with one float32 tensor [sites, 3] of the current
  /// amaxes, which it must reduce in place, e.g. across data-parallel ranks:
  ///   fp8.set_amax_reduction([&](const Tensor& a) { distributed::all_reduce(group, a, ReduceOp::max); });
  void set_amax_reduction(std::function<void(const Tensor& amax)> reduce);

  /// Sites seen so far, and each one's tensors (the live tensors, not copies).
  size_t num_sites() const;
  Tensor scale(size_t site) const;
  Tensor amax_history(size_t site) const;

  /// The recipe and every site's scale and history (copies), for checkpoints.
  StateDict state_dict() const;
  /// Restores a state_dict(): the recipe and the sites. ValueError /
  /// ShapeError / DTypeError naming "Fp8Scaler::load_state_dict" for a bad
  /// dict, with this scaler unchanged.
  void load_state_dict(const StateDict& state);

  struct Site;

 private:
  friend struct Fp8Access;
  Fp8Recipe recipe_;
  std::vector<std::shared_ptr<Site>> sites_;
  std::function<void(const Tensor&)> reduce_;
};

/// An FP8 region on this thread for the scope's lifetime (RAII, like
/// amp::autocast; regions nest and restore what they found). With
/// enabled = false it turns FP8 off inside an enclosing region.
class [[nodiscard]] fp8_autocast {
 public:
  explicit fp8_autocast(Fp8Scaler& scaler, bool enabled = true);
  ~fp8_autocast();
  fp8_autocast(const fp8_autocast&) = delete;
  fp8_autocast& operator=(const fp8_autocast&) = delete;

 private:
  Fp8Scaler* saved_scaler_;
  size_t saved_next_;
  bool saved_enabled_;
};

}  // namespace mixgrad::amp
