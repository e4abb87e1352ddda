// Autocast as the ops see it: the calling thread's state, and the cast that
// applies an op's policy to its inputs. The user-facing scope, wrapper and
// global switch (mixgrad/amp/autocast.hpp) all act on this state. A hook
// below ops (hooks/), implemented by amp (above ops).
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "mixgrad/tensor.hpp"
#include "core/op_table.hpp"

namespace mixgrad::amp::detail {

/// True when autocast applies on this thread now (scope or global switch).
bool autocast_active();

/// Applies `op`'s policy for the inputs' device type (the op table's column)
/// to the defined, floating, non-float64 inputs: replaces each handle by its
/// cast (a recorded astype) where the policy asks.
void cast_inputs(OpKind op, std::span<Tensor* const> inputs);

/// cast_inputs for a product (matmul, linear, conv1d, conv2d), which takes operands
/// of mixed dtypes where the CPU computes 16-bit products in float32 (no
/// 16-bit math: cpu::has_fast_math is false). There a float32 operand is
/// left as it is: casting it would round it to 16 bits only for the backend
/// to widen it straight back, two passes over every weight per step and two
/// more over its gradient. Returns the dtype of the product's result (the
/// low dtype) when it left an operand in float32; the other operands are
/// then that dtype, float32 or float64 (the op's error). Otherwise it casts
/// as cast_inputs does and returns nothing.
std::optional<DType> cast_product_inputs(OpKind op, std::span<Tensor* const> inputs);

/// Makes cast_product_inputs round float32 operands to the low dtype on
/// this thread while it lives, as on a CPU with 16-bit math: what the cast
/// cache's tests observe on any CPU.
class [[nodiscard]] RoundedProducts {
 public:
  RoundedProducts();
  ~RoundedProducts();
  RoundedProducts(const RoundedProducts&) = delete;
  RoundedProducts& operator=(const RoundedProducts&) = delete;

 private:
  bool saved_ = false;
};

/// Replaces `op`'s policy (on every device) on this thread while it lives.
/// A test seam, kept in the library because it is the only way to show that
/// an op reads its table entry: where the table's choice coincides with the
/// op's own type promotion (concat), no other observable changes.
class [[nodiscard]] PolicyOverride {
 public:
  PolicyOverride(OpKind op, CastPolicy p);
  ~PolicyOverride();
  PolicyOverride(const PolicyOverride&) = delete;
  PolicyOverride& operator=(const PolicyOverride&) = delete;

 private:
  OpKind op_;
  std::optional<CastPolicy> saved_;
};

/// Turns autocast off on this thread while it lives: for an op whose
/// composed math picks its own dtypes (attention's fallback, which runs 16-bit
/// inputs in float32 as the fused kernels do), so that the ops inside are
/// not cast back down.
class [[nodiscard]] AutocastOff {
 public:
  AutocastOff();
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool had_scope_ = false;
  bool was_enabled_ = false;
};

}  // namespace mixgrad::amp::detail

namespace mixgrad::amp {

/// The op-side hook: a no-op unless autocast is active.
inline void autocast_inputs(OpKind op, std::initializer_list<Tensor*> inputs) {
  if (detail::autocast_active()) detail::cast_inputs(op, std::span<Tensor* const>(inputs.begin(), inputs.size()));
}

/// The hook of a matrix product: the dtype of its result where autocast
/// left float32 operands beside 16-bit ones (detail::cast_product_inputs),
/// else nothing, and the op's inputs are of one dtype as usual.
inline std::optional<DType> autocast_product_inputs(OpKind op, std::initializer_list<Tensor*> inputs) {
  if (!detail::autocast_active()) return std::nullopt;
  return detail::cast_product_inputs(op, std::span<Tensor* const>(inputs.begin(), inputs.size()));
}

/// The same for a list of inputs (concat, stack).
inline void autocast_inputs(OpKind op, std::vector<Tensor>& inputs) {
  if (!detail::autocast_active()) return;
  std::vector<Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (Tensor& t : inputs) ptrs.push_back(&t);
  detail::cast_inputs(op, ptrs);
}

}  // namespace mixgrad::amp
