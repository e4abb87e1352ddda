// The losses: validation, autocast (all high precision), one fused backend
// kernel forward and one backward. The backward closures keep what the
// kernels need (for cross-entropy the per-sample max and log-sum-exp, so the
// softmax is not stored) and never the output.
//
// The class losses' labels are range-checked by the forward kernel, which
// reads them anyway, rather than by a separate pass here; so autocast's cast
// of their input is recorded only after the kernel has accepted the labels,
// and a bad label leaves the tape as it was.
#include "mixgrad/ops/loss.hpp"

#include <string>

#include "backend/loss.hpp"
#include "backend/pending_checks.hpp"
#include "core/description.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

backend::LossReduction to_backend(Reduction r) {
  switch (r) {
    case Reduction::mean: return backend::LossReduction::mean;
    case Reduction::sum: return backend::LossReduction::sum;
    case Reduction::none: break;
  }
  return backend::LossReduction::none;
}

DType accumulation_dtype(DType t) { return t == DType::float64 ? DType::float64 : DType::float32; }

/// A validated class-loss problem: the layout and the labels, contiguous.
struct ClassProblem {
  backend::ClassLayout layout;
  Tensor labels;
  Shape sample_shape;  // the input's shape without the class axis
  int axis = 1;        // the class axis
};

// Checks input and labels of cross_entropy / nll_loss before anything is
// cast, computed or recorded; the labels' range is the kernel's to check.
ClassProblem check_class_loss(const char* op, const Tensor& input, const Tensor& labels, int axis_option) {
  ops::check_defined(op, {&input, &labels});
  ops::check_same_device(op, {&input, &labels});
  ops::check_floating(op, input);
  if (labels.dtype() != DType::int32 && labels.dtype() != DType::int64)
    throw DTypeError(std::string(op) + ": labels must be int32 or int64, got " + ops::describe(labels));
  if (input.ndim() == 0) throw ShapeError(std::string(op) + ": input " + ops::describe(input) + " has no class axis");
  // A 1-d input is one unbatched sample: its only axis holds the classes.
  const int axis = input.ndim() == 1 && axis_option == 1 ? 0 : normalize_axis(axis_option, input.ndim(), op);
  ClassProblem p;
  p.axis = axis;
  p.sample_shape = input.shape();
  p.sample_shape.erase(axis);
  if (labels.shape() != p.sample_shape)
    throw ShapeError(std::string(op) + ": labels " + ops::describe(labels) + " do not fit input " +
                     ops::describe(input) + " with class axis " + std::to_string(axis) + " (expected labels of shape " +
                     to_string(p.sample_shape) + ")");
  for (int d = 0; d < axis; ++d) p.layout.outer *= input.shape()[d];
  p.layout.classes = input.shape()[axis];
  for (int d = axis + 1; d < input.ndim(); ++d) p.layout.inner *= input.shape()[d];
  p.labels = ops::dense(labels);
  return p;
}

[[noreturn]] void throw_bad_label(const std::string& op, const int64_t* st, const std::string& labels,
                                  const std::string& input, int64_t classes) {
  throw ValueError(op + ": label " + std::to_string(st[1]) + " at index " + std::to_string(st[0]) + " of labels " +
                   labels + " is out of range for input " + input + " with " + std::to_string(classes) +
                   " classes (expected 0 <= label < " + std::to_string(classes) + ")");
}

/// Throws the ValueError for the first bad label the forward reported: at
/// once on the CPU, at the device's next synchronisation otherwise
/// (backend/pending_checks.hpp), so the forward does not wait for it.
void check_label_status(const char* op, const Tensor& status, const Tensor& input, const Tensor& labels,
                        int64_t classes) {
  backend::check_status(status, [op = std::string(op), l = core::Description(labels), in = core::Description(input),
                                 classes](const int64_t* st) {
    if (st[0] >= 0) throw_bad_label(op, st, l.str(), in.str(), classes);
  });
}

/// Applies autocast to a class loss's input without recording the cast; see
/// record_cast.
Tensor autocast_unrecorded(OpKind kind, const Tensor& input) {
  Tensor x = input;
  autodiff::NoRecordScope unrecorded;
  amp::autocast_inputs(kind, {&x});
  return x;
}

/// Records the cast autocast_unrecorded made (if any), as F::astype would
/// have: its gradient is the incoming one cast back.
void record_cast(const Tensor& input, const Tensor& cast) {
  if (cast.impl() == input.impl()) return;
  autodiff::record(OpKind::astype, {&input}, cast, [&] {
    return [in = input.dtype()](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // an F:: op: differentiable as written
      gi.set(0, astype(g, in));
    };
  });
}

Shape loss_shape(Reduction r, const Shape& per_element) { return r == Reduction::none ? per_element : Shape{}; }

// ---- recorded (differentiable) gradients, as tracked F:: ops ------------------

/// A loss's upstream gradient g spread over the per-element shape: as it is
/// (none), broadcast (sum), broadcast and divided by `count` (mean).
Tensor spread(const Tensor& g, backend::LossReduction r, const Shape& shape, int64_t count) {
  if (r == backend::LossReduction::none) return g;
  const Tensor b = broadcast_to(g, shape);
  return r == backend::LossReduction::mean ? mul(b, 1.0 / static_cast<double>(std::max<int64_t>(count, 1))) : b;
}

/// 1 at each sample's label along `axis` of `shape`, else 0, in `dtype`.
Tensor one_hot(const Tensor& labels, const Shape& shape, int axis, DType dtype) {
  std::vector<int64_t> dims(static_cast<size_t>(shape.ndim()), 1);
  dims[static_cast<size_t>(axis)] = shape[axis];
  const Tensor classes = reshape(arange(shape[axis], labels.dtype(), labels.device()), Shape(dims));
  return astype(eq(unsqueeze(labels, axis), classes), dtype);
}

/// mse_loss, l1_loss and binary_cross_entropy_with_logits: one path.
Tensor pointwise_loss(const char* op, OpKind kind, backend::PointwiseLoss loss, const Tensor& pred_in,
                      const Tensor& target_in, Reduction reduction) {
  ops::check_defined(op, {&pred_in, &target_in});
  ops::check_same_device(op, {&pred_in, &target_in});
  ops::check_floating(op, pred_in);
  ops::check_floating(op, target_in);
  if (pred_in.shape() != target_in.shape())
    throw ShapeError(std::string(op) + ": prediction " + ops::describe(pred_in) + " and target " +
                     ops::describe(target_in) + " must have the same shape");
  Tensor pred = pred_in, target = target_in;
  amp::autocast_inputs(kind, {&pred, &target});
  if (pred.dtype() != target.dtype()) {  // e.g. a bfloat16 prediction against a float32 target
    const DType common = promote_types(pred.dtype(), target.dtype());
    pred = astype(pred, common);
    target = astype(target, common);
  }
  const backend::PointwiseLossArgs args{
      .kind = loss, .pred = ops::dense(pred), .target = ops::dense(target), .reduction = to_backend(reduction)};
  Tensor out = empty(loss_shape(reduction, pred.shape()), pred.dtype(), pred.device());
  backend::pointwise_loss_forward(args, out);
  autodiff::record(kind, {&pred, &target}, out, [&] {
    return [args, pred, target](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // the kernel's derivatives on the forward's own (tracked) tensors
        const Tensor ge = spread(g, args.reduction, pred.shape(), pred.numel());
        Tensor dp, dt;
        switch (args.kind) {
          case backend::PointwiseLoss::mse:
            dp = mul(mul(sub(pred, target), ge), 2.0);
            dt = neg(dp);
            break;
          case backend::PointwiseLoss::l1: {
            const Tensor diff = sub(pred, target), zero = zeros_like(ge);
            dp = where(gt(diff, 0.0), ge, where(lt(diff, 0.0), neg(ge), zero));
            dt = neg(dp);
            break;
          }
          case backend::PointwiseLoss::bce_with_logits:
            dp = mul(sub(sigmoid(pred), target), ge);
            dt = neg(mul(pred, ge));
            break;
        }
        if (gi.needs(0)) gi.set(0, dp);
        if (gi.needs(1)) gi.set(1, dt);
        return;
      }
      const Tensor& p = args.pred;
      backend::LossGrads grads;
      if (gi.needs(0)) grads.input = empty(p.shape(), p.dtype(), p.device());
      if (gi.needs(1)) grads.target = empty(p.shape(), p.dtype(), p.device());
      backend::pointwise_loss_backward(args, ops::dense(g, p.dtype()), grads);
      if (gi.needs(0)) gi.set(0, grads.input);
      if (gi.needs(1)) gi.set(1, grads.target);
    };
  });
  return out;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels, const CrossEntropyOptions& options) {
  const char* kOp = "cross_entropy";
  ClassProblem p = check_class_loss(kOp, logits_in, labels, options.axis);
  if (!(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0))
    throw ValueError(std::string(kOp) + ": label_smoothing must be in [0, 1], got " +
                     std::to_string(options.label_smoothing) + " for input " + ops::describe(logits_in));
  const Tensor logits = autocast_unrecorded(OpKind::cross_entropy, logits_in);
  const backend::ClassLossArgs args{.input = ops::dense(logits),
                                    .labels = p.labels,
                                    .layout = p.layout,
                                    .reduction = to_backend(options.reduction),
                                    .label_smoothing = options.label_smoothing};
  Tensor out = empty(loss_shape(options.reduction, p.sample_shape), logits.dtype(), logits.device());
  Tensor stats = empty(Shape{p.layout.samples(), 2}, accumulation_dtype(logits.dtype()), logits.device());
  const Tensor status = backend::status_tensor(logits.device());
  backend::cross_entropy_forward(args, out, stats, status);
  check_label_status(kOp, status, logits_in, labels, p.layout.classes);
  record_cast(logits_in, logits);
  autodiff::record(OpKind::cross_entropy, {&logits}, out, [&] {
    return [args, stats, logits, axis = p.axis](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // scale (softmax(x) - target), tracked
        const int64_t classes = args.layout.classes;
        Tensor target = one_hot(args.labels, logits.shape(), axis, logits.dtype());
        if (args.label_smoothing > 0)
          target = add(mul(target, 1.0 - args.label_smoothing), args.label_smoothing / static_cast<double>(classes));
        const Tensor ge = args.reduction == backend::LossReduction::none
                              ? unsqueeze(g, axis)
                              : spread(g, args.reduction, Shape{}, args.layout.samples());
        return gi.set(0, mul(sub(softmax(logits, axis), target), ge));
      }
      const Tensor& x = args.input;
      Tensor grad = empty(x.shape(), x.dtype(), x.device());
      backend::cross_entropy_backward(args, stats, ops::dense(g, x.dtype()), grad);
      gi.set(0, grad);
    };
  });
  return out;
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& labels, const LossOptions& options) {
  const char* kOp = "nll_loss";
  ClassProblem p = check_class_loss(kOp, log_probs_in, labels, 1);
  const Tensor log_probs = autocast_unrecorded(OpKind::nll_loss, log_probs_in);
  const backend::ClassLossArgs args{.input = ops::dense(log_probs),
                                    .labels = p.labels,
                                    .layout = p.layout,
                                    .reduction = to_backend(options.reduction)};
  Tensor out = empty(loss_shape(options.reduction, p.sample_shape), log_probs.dtype(), log_probs.device());
  const Tensor status = backend::status_tensor(log_probs.device());
  backend::nll_loss_forward(args, out, status);
  check_label_status(kOp, status, log_probs_in, labels, p.layout.classes);
  record_cast(log_probs_in, log_probs);
  // The gradient does not depend on the input's values: keep only its shape.
  backend::ClassLossArgs grad_args = args;
  grad_args.input = Tensor();
  autodiff::record(OpKind::nll_loss, {&log_probs}, out, [&] {
    return [grad_args, shape = log_probs.shape(), dtype = log_probs.dtype(), axis = p.axis](const Tensor& g,
                                                                                            autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // -onehot scale g: linear in g, tracked through g
        const Tensor ge = grad_args.reduction == backend::LossReduction::none
                              ? unsqueeze(g, axis)
                              : spread(g, grad_args.reduction, Shape{}, grad_args.layout.samples());
        return gi.set(0, neg(mul(one_hot(grad_args.labels, shape, axis, dtype), ge)));
      }
      Tensor grad = empty(shape, dtype, g.device());
      backend::nll_loss_backward(grad_args, ops::dense(g, dtype), grad);
      gi.set(0, grad);
    };
  });
  return out;
}

Tensor mse_loss(const Tensor& pred, const Tensor& target, const LossOptions& options) {
  return pointwise_loss("mse_loss", OpKind::mse_loss, backend::PointwiseLoss::mse, pred, target, options.reduction);
}

Tensor l1_loss(const Tensor& pred, const Tensor& target, const LossOptions& options) {
  return pointwise_loss("l1_loss", OpKind::l1_loss, backend::PointwiseLoss::l1, pred, target, options.reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const LossOptions& options) {
  return pointwise_loss("binary_cross_entropy_with_logits", OpKind::binary_cross_entropy_with_logits,
                        backend::PointwiseLoss::bce_with_logits, logits, target, options.reduction);
}

}  // namespace mixgrad::F
