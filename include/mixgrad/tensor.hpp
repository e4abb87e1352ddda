// mixgrad/tensor.hpp — the Tensor handle.
//
// A Tensor is a cheap, shared handle (copying it does not copy data) to a
// strided view of a Storage, with a dtype and a device. An undefined tensor
// (`Tensor()`) has no data; `defined()` tells.
//
//   mg::Tensor x = mg::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
//   x.shape();                 // [2, 2]
//   x.to(mg::DType::bfloat16); // a converted copy
//   x.reshape({4}).narrow(0, 1, 2).contiguous();
//   x.grad();                  // undefined until a GradManager's backward fills it
//   mg::Tensor img = mg::uniform({8, 3, 32, 32}).contiguous(mg::MemoryFormat::channels_last);
//   img.shape();               // still [8, 3, 32, 32]; strides [3072, 1, 96, 3]
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mixgrad/device.hpp"
#include "mixgrad/dtype.hpp"
#include "mixgrad/shape.hpp"
#include "mixgrad/storage.hpp"

namespace mixgrad {

struct TensorImpl;
struct GradScaling;

/// How a 4-d (5-d) tensor's elements lie in memory, as PyTorch's
/// torch.memory_format: in the logical order (contiguous: N, C, H, W), or
/// with the channels innermost (channels_last: N, H, W, C in memory for the
/// logical [N, C, H, W]; channels_last_3d: N, D, H, W, C). Shapes, indices
/// and values never depend on it. Ops keep it: see docs/memory_format.md.
enum class MemoryFormat : uint8_t { contiguous, channels_last, channels_last_3d };
std::string_view to_string(MemoryFormat format);
/// The strides of a dense tensor of `shape` laid out in `format`. ShapeError
/// naming `op` (and the shape) unless the shape has 4 dims for
/// channels_last, 5 for channels_last_3d.
Shape memory_format_strides(const Shape& shape, MemoryFormat format, const char* op = "memory_format_strides");

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }

  const Shape& shape() const;
  const Shape& strides() const;
  int ndim() const { return shape().ndim(); }
  /// Extent of dimension `dim` (negative counts from the back).
  int64_t size(int dim) const { return shape().at(dim); }
  int64_t numel() const { return shape().numel(); }
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  /// True when the elements lie densely in `format`'s order; extent-1 dims
  /// are not looked at (a [N, 1, H, W] or [N, C, 1, 1] tensor is both
  /// contiguous and channels-last). False for a tensor of another rank.
  bool is_contiguous(MemoryFormat format) const;
  /// The format ops give results in: channels_last (channels_last_3d) for a
  /// tensor laid out so and not also contiguous, else contiguous.
  MemoryFormat suggest_memory_format() const;

  /// A copy converted to `dtype` (the same tensor if it already is). Recorded
  /// by a recording GradManager like any op (see F::astype). Floating values
  /// become integers truncated toward zero; into int8 / uint8 through int64,
  /// keeping the low 8 bits as PyTorch does (300.0 -> int8 44, -1.0 -> uint8
  /// 255), with NaN, infinities and values beyond int64 giving 0.
  Tensor to(DType dtype) const;
  /// A copy on `device` (the same tensor if it already is there).
  Tensor to(Device device) const;
  /// A contiguous copy that owns its memory.
  Tensor clone() const;
  /// This tensor if contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// This tensor if is_contiguous(format), else a copy laid out in `format`
  /// (recorded like clone; the values and shape are the same). ShapeError
  /// naming the op, the shape and the dtype for a rank the format lacks.
  Tensor contiguous(MemoryFormat format) const;
  /// The same elements in a new shape; one extent may be -1.
  Tensor reshape(const Shape& shape) const;
  /// `len` elements of dimension `dim` starting at `start`: a view.
  Tensor narrow(int dim, int64_t start, int64_t len) const;
  /// Shares the data, drops the history: never tracked by a GradManager.
  Tensor detach() const;

  /// Typed pointer to the first element; T must match dtype(), CPU only.
  template <class T> T* data();
  template <class T> const T* data() const;
  void* raw_data() const;

  /// The single element (numel() == 1), converted to T. Syncs with the device.
  template <class T> T item() const;
  /// Element at a multi-index, converted to T (for tests and debugging).
  template <class T> T at(std::initializer_list<int64_t> index) const;
  /// All elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector() const;

  /// Gradient accumulated by GradManager::backward; undefined until then.
  Tensor grad() const;
  /// Sets (or, with an undefined `g`, clears) the gradient that the next
  /// backward accumulates into and optimizers read. `g` must have this
  /// tensor's shape (ShapeError) and device (DeviceError), a floating dtype
  /// (DTypeError; backward itself produces this tensor's dtype, and any
  /// floating dtype is accumulated into and read correctly), and must not be
  /// a view whose elements overlap, such as a broadcast (ShapeError): each
  /// element is accumulated into on its own. This tensor must be floating.
  /// A throwing call leaves the gradient as it was.
  void set_grad(Tensor g) const;

  /// Unique id of this handle's tensor (a view or a detach gets a new one).
  uint64_t id() const;
  /// Counts in-place modifications of the values; whoever writes a tensor in
  /// place (optimizers, load_state_dict, init) calls bump_version(), so
  /// caches derived from the values (autocast's weight casts) know.
  uint64_t version() const;
  void bump_version() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

/// The state behind a Tensor handle. Part of the API for backends and tools.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;       // in elements
  DType dtype = DType::float32;
  uint64_t id = 0;
  uint64_t version = 0;  // bumped by in-place writes (optimizer steps, loads)
  Tensor grad;
  // How a loss scale multiplies this tensor's values, as a gradient, a loss
  // or an upstream gradient (mixgrad/amp_step.hpp): allocated only for the
  // tensors a scaler or a user's dy marked; null is "not scaled".
  std::unique_ptr<GradScaling> scaling;

  TensorImpl(std::shared_ptr<Storage> s, int64_t off, const Shape& sh, const Shape& st, DType dt);
  ~TensorImpl();
};

/// A new, uninitialised, contiguous tensor. Throws ShapeError for a negative
/// extent or a shape whose element or byte count does not fit in int64, and
/// OutOfMemoryError when the memory cannot be allocated.
Tensor empty(const Shape& shape, DType dtype = DType::float32, Device device = Device::cpu());
/// As above, laid out in `format` (see memory_format_strides).
Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

inline const Shape& Tensor::shape() const { return impl_->shape; }
inline const Shape& Tensor::strides() const { return impl_->strides; }
inline DType Tensor::dtype() const { return impl_->dtype; }
inline Device Tensor::device() const { return impl_->storage->device(); }
inline uint64_t Tensor::id() const { return impl_->id; }
inline uint64_t Tensor::version() const { return impl_->version; }
inline void Tensor::bump_version() const { ++impl_->version; }
inline void* Tensor::raw_data() const {
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * element_size(impl_->dtype);
}

namespace detail {
[[noreturn]] void throw_data_type_mismatch(DType have, DType want);
void check_host_access(const Tensor& t, const char* what);
double element_as_double(const Tensor& t, int64_t linear_index);
/// The element types to_vector converts to in one compiled loop (else one
/// element_as_double call per element).
template <class T>
inline constexpr bool kBulkConvertible =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> ||
    std::is_same_v<T, bfloat16> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
    std::is_same_v<T, bool> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>;
/// out[i] = T(double(element i)) for the elements of a contiguous host tensor.
template <class T>
void convert_elements(const Tensor& contiguous, T* out);
}  // namespace detail

template <class T> T* Tensor::data() {
  if (dtype_of<T>() != dtype()) detail::throw_data_type_mismatch(dtype(), dtype_of<T>());
  detail::check_host_access(*this, "data");
  return static_cast<T*>(raw_data());
}
template <class T> const T* Tensor::data() const {
  if (dtype_of<T>() != dtype()) detail::throw_data_type_mismatch(dtype(), dtype_of<T>());
  detail::check_host_access(*this, "data");
  return static_cast<const T*>(raw_data());
}

template <class T> std::vector<T> Tensor::to_vector() const {
  const Tensor c = to(Device::cpu()).contiguous();
  if constexpr (detail::kBulkConvertible<T>) {
    std::vector<T> out(static_cast<size_t>(c.numel()));
    detail::convert_elements(c, out.data());
    return out;
  } else {
    std::vector<T> out(static_cast<size_t>(c.numel()));
    for (int64_t i = 0; i < c.numel(); ++i) out[i] = static_cast<T>(detail::element_as_double(c, i));
    return out;
  }
}

template <class T> T Tensor::item() const {
  if (numel() != 1) throw ShapeError("item: tensor of shape " + to_string(shape()) + " has more than one element");
  return to_vector<T>()[0];
}

template <class T> T Tensor::at(std::initializer_list<int64_t> index) const {
  if (static_cast<int>(index.size()) != ndim())
    throw ShapeError("at: " + std::to_string(index.size()) + " indices for shape " + to_string(shape()));
  detail::check_host_access(*this, "at");
  int64_t offset = 0;  // in elements from raw_data(), through the strides: views need no copy
  int d = 0;
  for (int64_t i : index) {
    if (i < 0 || i >= shape()[d]) throw ShapeError("at: index out of range for shape " + to_string(shape()));
    offset += i * strides()[d++];
  }
  return static_cast<T>(detail::element_as_double(*this, offset));
}

}  // namespace mixgrad
