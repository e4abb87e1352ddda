#include "mixgrad/autodiff/function.hpp"

#include <span>

#include "hooks/op_hooks.hpp"
#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/autodiff/no_grad.hpp"
#include "mixgrad/ops/creation.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::autodiff {

namespace {

// What one output's tape node needs to rebuild the full list of output
// gradients for backward.
struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
  bool floating;
};

std::string where(const Function& fn) { return "autodiff::Function '" + fn.name() + "'"; }

// The checks of the file comment, on the gradients backward returned; they
// throw before the tape sees any of them, so nothing has accumulated yet.
void check_input_grads(const Function& fn, const std::vector<Tensor>& grads, const InputGrads& gi,
                       const std::vector<Shape>& shapes, const std::vector<DType>& dtypes,
                       const std::vector<Device>& devices) {
  if (grads.size() != shapes.size())
    throw ShapeError(where(fn) + ": backward returned " + std::to_string(grads.size()) + " gradients for " +
                     std::to_string(shapes.size()) + " inputs");
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!gi.needs(i) || !g.defined()) continue;
    const std::string input = std::string(to_string(dtypes[i])) + to_string(shapes[i]);
    if (g.shape() != shapes[i])
      throw ShapeError(where(fn) + ": backward returned a gradient " + core::describe(g) + " for input " +
                       std::to_string(i) + " " + input);
    if (!is_floating_point(g.dtype()))
      throw DTypeError(where(fn) + ": backward returned a non-floating gradient " + core::describe(g) +
                       " for input " + std::to_string(i) + " " + input);
    if (g.device() != devices[i])
      throw DeviceError(where(fn) + ": backward returned a gradient on " + to_string(g.device()) + " for input " +
                        std::to_string(i) + " on " + to_string(devices[i]));
  }
}

}  // namespace

namespace {

// fn's forward as one op: its inner ops stay off the tape; under autocast
// with cast_inputs, on the inputs cast to that dtype, with autocast off.
std::vector<Tensor> run_forward(Function& fn, const std::vector<Tensor>& inputs, const amp::AutocastState& state) {
  NoRecordScope no_record;
  if (!fn.cast_inputs || !state.enabled) return fn.forward(inputs);
  std::vector<Tensor> cast = inputs;
  for (Tensor& t : cast)
    if (t.defined() && is_floating_point(t.dtype()) && t.dtype() != DType::float64)
      t = ops::in_dtype(t, *fn.cast_inputs);
  amp::autocast off(false);
  return fn.forward(cast);
}

// What the backward needs to know of the outputs; an output that is one of
// the inputs is replaced by a detached handle (a node whose output is its
// own input would feed itself).
std::vector<OutputMeta> output_meta(const Function& fn, std::vector<Tensor>& outputs,
                                    const std::vector<Tensor>& inputs) {
  std::vector<OutputMeta> meta;
  meta.reserve(outputs.size());
  for (size_t j = 0; j < outputs.size(); ++j) {
    Tensor& out = outputs[j];
    if (!out.defined()) throw ValueError(where(fn) + ": forward returned an undefined output " + std::to_string(j));
    for (const Tensor& in : inputs)
      if (in.defined() && in.id() == out.id()) {
        out = out.detach();
        break;
      }
    meta.push_back({out.shape(), out.dtype(), out.device(), is_floating_point(out.dtype())});
  }
  return meta;
}

// The closure recorded for output j: the user's backward given output j's
// gradient (zeros for the others), under the forward's autocast state.
BackwardFn backward_of_output(const std::shared_ptr<Function>& fn, size_t j, const amp::AutocastState& state,
                              const std::shared_ptr<const std::vector<OutputMeta>>& meta,
                              const std::vector<Tensor>& inputs) {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<Device> devices;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.defined() ? t.shape() : Shape{});
    dtypes.push_back(t.defined() ? t.dtype() : DType::float32);
    devices.push_back(t.defined() ? t.device() : Device::cpu());
  }
  return [fn, j, state, meta, shapes = std::move(shapes), dtypes = std::move(dtypes), devices = std::move(devices),
          name = fn->name()](const Tensor& grad, InputGrads& gi) {
    // The user's backward runs as written: in a recorded backward its F::
    // ops are recorded like any op, so it is differentiable when they are.
    // A once_differentiable one runs unrecorded and does not ask, so its
    // gradients are marked as not differentiable, under its name.
    std::optional<no_grad> unrecorded;
    if (fn->once_differentiable) {
      gi.name_op(name.c_str());
      unrecorded.emplace();
    } else {
      (void)gi.create_graph();
    }
    std::vector<Tensor> output_grads(meta->size());
    for (size_t k = 0; k < output_grads.size(); ++k) {
      const OutputMeta& m = (*meta)[k];
      if (k == j)
        output_grads[k] = grad;
      else if (m.floating)
        output_grads[k] = zeros(m.shape, m.dtype, m.device);
    }
    const amp::detail::SavedState saved = amp::detail::enter(state);
    struct Restore {
      amp::detail::SavedState saved;
      ~Restore() { amp::detail::leave(saved); }
    } restore{saved};
    std::vector<Tensor> grads = fn->backward(output_grads);
    check_input_grads(*fn, grads, gi, shapes, dtypes, devices);
    for (size_t i = 0; i < grads.size(); ++i)
      if (gi.needs(i) && grads[i].defined()) gi.set(i, std::move(grads[i]));
  };
}

}  // namespace

std::vector<Tensor> apply(const std::shared_ptr<Function>& fn, const std::vector<Tensor>& inputs) {
  if (!fn) throw ValueError("autodiff::apply: null function");
  const amp::AutocastState state = amp::current_state();  // what backward re-establishes
  std::vector<Tensor> outputs = run_forward(*fn, inputs, state);
  std::vector<OutputMeta> meta = output_meta(*fn, outputs, inputs);
  if (!is_recording()) return outputs;

  std::vector<const Tensor*> in_ptrs;
  in_ptrs.reserve(inputs.size());
  for (const Tensor& t : inputs) in_ptrs.push_back(&t);
  const std::span<const Tensor* const> in_span(in_ptrs.data(), in_ptrs.size());
  auto shared_meta = std::make_shared<const std::vector<OutputMeta>>(std::move(meta));
  for (size_t j = 0; j < outputs.size(); ++j) {
    if (!(*shared_meta)[j].floating) continue;  // indices: no gradient flows through them
    record(OpKind::kCount, in_span, outputs[j],  // not a table op: the closure names itself
                [&] { return backward_of_output(fn, j, state, shared_meta, inputs); });
  }
  return outputs;
}

}  // namespace mixgrad::autodiff
