// Tensor's member functions that are ops in disguise: they go through F:: so
// that they are recorded like any op.
#include "autodiff/tape.hpp"
#include "backend/copy.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad {

Tensor Tensor::to(DType dtype) const { return F::astype(*this, dtype); }

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  throw DeviceError("Tensor::to: copies between " + to_string(this->device()) + " and " + to_string(device) +
                    " need the CUDA backend");
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  backend::copy(*this, out);
  autodiff::record({this}, out, [](const Tensor& g, autodiff::InputGrads& gi) { gi.set(0, g); });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }
Tensor Tensor::reshape(const Shape& shape) const { return F::reshape(*this, shape); }
Tensor Tensor::narrow(int dim, int64_t start, int64_t len) const { return F::narrow(*this, dim, start, len); }
Tensor Tensor::detach() const { return F::detach(*this); }

}  // namespace mixgrad
