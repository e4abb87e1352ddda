// Tensor's member functions that are ops in disguise: they go through F:: so
// that they are recorded like any op.
#include "hooks/op_hooks.hpp"
#include "backend/copy.hpp"
#include "core/memory_order.hpp"
#include "core/view.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "mixgrad/tensor.hpp"
#include "ops/op_support.hpp"

namespace mixgrad {

namespace {
// t, dense in `format`, seen with its dims in memory order
// (core::memory_order): a contiguous view of its bytes.
Tensor in_memory_order(const Tensor& t, MemoryFormat format) {
  if (format == MemoryFormat::contiguous) return t;
  const std::array<int, Shape::kMaxDims> order = core::memory_order(t.ndim(), format);
  Shape shape = t.shape(), strides = t.strides();
  for (int i = 0; i < t.ndim(); ++i) {
    shape[i] = t.shape()[order[i]];
    strides[i] = t.strides()[order[i]];
  }
  return view::make(t, shape, strides);
}
}  // namespace

Tensor Tensor::to(DType dtype) const { return F::astype(*this, dtype); }

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  if (!cuda::is_built())
    throw DeviceError("Tensor::to: cannot copy " + ops::describe(*this) + " from " + to_string(this->device()) +
                      " to " + to_string(device) + ": mixgrad was built without CUDA");
  if (device.is_cuda() && device.index() >= cuda::device_count())
    throw DeviceError("Tensor::to: cannot copy " + ops::describe(*this) + " to " + to_string(device) + ": " +
                      std::to_string(cuda::device_count()) + " CUDA device(s) available");
  // The bytes move as one block, in the source's memory format (a
  // channels-last tensor arrives channels-last, as in PyTorch): a source not
  // dense in it is gathered on its own device first (not recorded: this op
  // records itself as a whole below).
  const MemoryFormat format = suggest_memory_format();
  Tensor src = *this;
  if (!src.is_contiguous(format)) {
    src = empty(shape(), dtype(), this->device(), format);
    backend::copy(*this, src);
  }
  Tensor out = empty(shape(), dtype(), device, format);
  backend::transfer(in_memory_order(src, format), in_memory_order(out, format));
  autodiff::record(OpKind::kCount, {this}, out, [&] {
    return [from = this->device()](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // F:: ops: differentiable as written
      gi.set(0, g.to(from));
    };
  });
  return out;
}

namespace {
// A copy of t laid out in `format`, recorded: the gradient passes through.
Tensor copy_as(const Tensor& t, MemoryFormat format) {
  Tensor out = empty(t.shape(), t.dtype(), t.device(), format);
  backend::copy(t, out);
  autodiff::record(OpKind::kCount, {&t}, out, [&] {
    return [](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // F:: ops: differentiable as written
      gi.set(0, g);
    };
  });
  return out;
}
}  // namespace

Tensor Tensor::clone() const { return copy_as(*this, MemoryFormat::contiguous); }

Tensor Tensor::contiguous(MemoryFormat format) const {
  ops::check_defined("contiguous", {this});
  if (format != MemoryFormat::contiguous && ndim() != (format == MemoryFormat::channels_last ? 4 : 5))
    throw ShapeError(std::string("contiguous(").append(to_string(format)).append("): expected a ")
                         .append(format == MemoryFormat::channels_last ? "4-d [N, C, H, W]" : "5-d [N, C, D, H, W]")
                         .append(" tensor, got ").append(ops::describe(*this)));
  return is_contiguous(format) ? *this : copy_as(*this, format);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }
Tensor Tensor::reshape(const Shape& shape) const { return F::reshape(*this, shape); }
Tensor Tensor::narrow(int dim, int64_t start, int64_t len) const { return F::narrow(*this, dim, start, len); }
Tensor Tensor::detach() const { return F::detach(*this); }

}  // namespace mixgrad
