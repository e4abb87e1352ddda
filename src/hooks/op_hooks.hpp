// The hooks: the two calls through which every op reaches the layers above
// it, declared here (below ops) and implemented above ops, so that no include
// runs from ops up to autodiff or amp. An op calls them in this order:
//
//   amp::autocast_inputs(OpKind::mul, {&a2, &b2});    // autocast's casts, before the kernel
//   Tensor out = ...forward...;
//   autodiff::record(OpKind::mul, {&a, &b}, out, [a, b](const Tensor& g, autodiff::InputGrads& gi) {
//     if (gi.needs(0)) gi.set(0, g * b);            // the tape, after it
//     if (gi.needs(1)) gi.set(1, g * a);
//   });
//
// Each costs one thread-local load and a branch when it has nothing to do
// (autocast off; nothing recording, the common case outside training): no
// cast is looked up and no closure is built.
//
// The tape (namespace autodiff, implemented in src/autodiff/): how an op
// writes itself onto the tape of every GradManager that records on this
// thread and tracks one of its inputs.
//
// Autocast (namespace amp, implemented in src/amp/autocast.cpp): the calling
// thread's state and the cast that applies an op's policy to its inputs. The
// user-facing scope, wrapper and global switch (mixgrad/amp/autocast.hpp)
// all act on this state.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/op_table.hpp"
#include "mixgrad/tensor.hpp"

// ---------------------------------------------------------------- the tape

namespace mixgrad::autodiff {

class GradManager;

/// The gradients a backward closure produces, one slot per op input.
///
/// Higher order: when the walk records the backward (create_graph, or an
/// outer manager records a nested manager's backward), create_graph() is
/// true, recording is on and autocast is off. A closure then computes its
/// gradients with F:: ops on the tensors it saved (the forward's own tensors,
/// so the results are tracked), never with backend kernels:
///
///   if (gi.create_graph()) { gi.set(0, F::mul(g, b)); return; }   // recorded
///   gi.set(0, fast_kernel(g, b));                                  // the usual path
///
/// Asking create_graph() is the closure's promise to do so. A closure that
/// never asks is not differentiable: the walk marks the gradients it made,
/// and a later backward that reaches one throws StateError naming the op.
class InputGrads {
 public:
  explicit InputGrads(const std::vector<bool>& needs, bool create_graph = false)
      : needs_(needs), grads_(needs.size()), create_graph_(create_graph) {}
  /// True when input i's gradient is wanted; compute only those.
  bool needs(size_t i) const { return needs_[i]; }
  void set(size_t i, Tensor g) { grads_[i] = std::move(g); }
  /// Where a gradient set by set_block lies in its input.
  struct Block {
    int dim = -1;  // -1: the whole input (set)
    int64_t start = 0;
  };
  /// Input i's gradient is `g` in the block [start, start + g's extent) of
  /// `dim` and zero elsewhere (narrow's backward): the walk adds `g` into
  /// that block of the input's gradient instead of adding a tensor of zeros
  /// around it. Not for a recorded backward (create_graph), which sets
  /// whole tracked tensors.
  void set_block(size_t i, Tensor g, int dim, int64_t start) {
    grads_[i] = std::move(g);
    if (blocks_.size() < grads_.size()) blocks_.resize(grads_.size());
    blocks_[i] = {dim, start};
  }
  /// The block set_block gave input i, or nullptr for a whole gradient.
  const Block* block(size_t i) const { return i < blocks_.size() && blocks_[i].dim >= 0 ? &blocks_[i] : nullptr; }
  std::vector<Tensor>& grads() { return grads_; }
  /// True when this backward is itself recorded (see above).
  bool create_graph() {
    asked_ = true;
    return create_graph_;
  }
  /// Whether the closure asked create_graph() (read by the walk).
  bool asked() const { return asked_; }
  /// Names the op for errors about this backward where its node's OpKind
  /// does not (a user's autodiff::Function, recorded as OpKind::kCount).
  void name_op(const char* op) { op_ = op; }
  /// The name given by name_op, or nullptr.
  const char* op() const { return op_; }

 private:
  const std::vector<bool>& needs_;
  std::vector<Tensor> grads_;
  std::vector<Block> blocks_;  // empty unless set_block was called
  bool create_graph_ = false;
  bool asked_ = false;
  const char* op_ = nullptr;
};

using BackwardFn = std::function<void(const Tensor& grad_output, InputGrads& grads)>;

/// One recorded op: which op, which tensors went in, which came out, how to
/// go back. `op` names it in errors; OpKind::kCount for an op outside the
/// table (a user's autodiff::Function, whose closure names itself).
struct Node {
  OpKind op = OpKind::kCount;
  std::vector<uint64_t> input_ids;
  std::vector<DType> input_dtypes;
  std::vector<Shape> input_shapes;
  std::vector<bool> needs;
  uint64_t output_id = 0;
  BackwardFn backward;
};

namespace detail {
/// Managers recording on this thread (usually none or one).
std::vector<GradManager*>& recording_managers();
/// >0 while a backward runs on this thread: ops are not recorded then.
int& recording_paused();
bool tracks(GradManager* gm, uint64_t id);
void push(GradManager* gm, const std::shared_ptr<Node>& node);
/// Changes whenever a GradManager starts or stops recording on this thread;
/// a cast cached under one epoch is not reused under another.
uint64_t recording_epoch();
}  // namespace detail

/// True when the tensor with this id is attached to some live GradManager
/// (in any thread): a parameter, in the user's terms.
bool is_attached(uint64_t id);

/// True when some GradManager records on this thread (and is not paused).
inline bool is_recording() { return !detail::recording_managers().empty() && detail::recording_paused() == 0; }

/// Writes `out = op(inputs)` onto the tape of every recording manager that
/// tracks one of the inputs: the one way an op records its backward.
/// `make_backward()` builds the closure and is called only then, so what
/// the closure captures (tensors, shapes) costs nothing in inference:
///
///   autodiff::record(OpKind::mul, {&a, &b}, out, [&] {
///     return [a, b](const Tensor& g, autodiff::InputGrads& gi) { ... };
///   });
template <class MakeBackward>
void record(OpKind op, std::span<const Tensor* const> inputs, const Tensor& out, MakeBackward&& make_backward) {
  static_assert(std::is_invocable_v<MakeBackward&>,
                "autodiff::record takes a function that builds the backward closure: "
                "[&] { return [captures](const Tensor& g, InputGrads& gi) { ... }; }");
  if (!is_recording()) return;
  auto& managers = detail::recording_managers();
  std::vector<bool> needs(inputs.size(), false);
  bool any = false;
  for (GradManager* gm : managers)
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i]->defined() && detail::tracks(gm, inputs[i]->id())) needs[i] = any = true;
  if (!any) return;
  auto node = std::make_shared<Node>();
  node->op = op;
  node->input_ids.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    node->input_ids.push_back(t->defined() ? t->id() : 0);
    node->input_dtypes.push_back(t->defined() ? t->dtype() : DType::float32);
    node->input_shapes.push_back(t->defined() ? t->shape() : Shape{});
  }
  node->needs = std::move(needs);
  node->output_id = out.id();
  node->backward = make_backward();
  for (GradManager* gm : managers) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i]->defined() && detail::tracks(gm, inputs[i]->id())) {
        detail::push(gm, node);
        break;
      }
    }
  }
}

/// As above, for a braced list of inputs.
template <class MakeBackward>
void record(OpKind op, std::initializer_list<const Tensor*> inputs, const Tensor& out, MakeBackward&& make_backward) {
  record(op, std::span<const Tensor* const>(inputs.begin(), inputs.size()), out,
         std::forward<MakeBackward>(make_backward));
}

/// Stops recording on this thread for its lifetime (backward passes,
/// optimizer steps, weight initialisation).
class [[nodiscard]] NoRecordScope {
 public:
  NoRecordScope() { ++detail::recording_paused(); }
  ~NoRecordScope() { --detail::recording_paused(); }
  NoRecordScope(const NoRecordScope&) = delete;
  NoRecordScope& operator=(const NoRecordScope&) = delete;
};

}  // namespace mixgrad::autodiff

// ---------------------------------------------------------------- autocast

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
