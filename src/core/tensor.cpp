#include "mixgrad/tensor.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <iomanip>
#include <new>
#include <utility>

#include "mixgrad/amp_step.hpp"
#include "core/grad_check.hpp"
#include "core/memory_order.hpp"
#include "core/sizes.hpp"

namespace mixgrad {

namespace {
std::atomic<uint64_t> g_next_id{1};
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> s, int64_t off, const Shape& sh, const Shape& st, DType dt)
    : storage(std::move(s)), offset(off), shape(sh), strides(st), dtype(dt),
      id(g_next_id.fetch_add(1, std::memory_order_relaxed)) {}

TensorImpl::~TensorImpl() = default;  // here, where GradScaling is complete

Tensor empty(const Shape& shape, DType dtype, Device device) {
  const int64_t nbytes = sizes::nbytes(shape, dtype, "empty");
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(nbytes, device);
  } catch (const OutOfMemoryError& e) {  // say which tensor did not fit
    throw OutOfMemoryError("empty: a " + std::string(to_string(dtype)) + to_string(shape) + " tensor: " + e.what());
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError("empty: a " + std::string(to_string(dtype)) + to_string(shape) + " tensor: out of memory");
  }
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), 0, shape, contiguous_strides(shape), dtype));
}

namespace {
// The rank a memory format is for (contiguous: any).
int format_rank(MemoryFormat f) {
  return f == MemoryFormat::channels_last ? 4 : f == MemoryFormat::channels_last_3d ? 5 : -1;
}

}  // namespace

std::string_view to_string(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::contiguous: return "contiguous";
    case MemoryFormat::channels_last: return "channels_last";
    case MemoryFormat::channels_last_3d: return "channels_last_3d";
  }
  return "unknown";
}

Shape memory_format_strides(const Shape& shape, MemoryFormat format, const char* op) {
  const int rank = format_rank(format);
  if (rank < 0) return contiguous_strides(shape);
  if (shape.ndim() != rank)
    throw ShapeError(std::string(op).append(": ").append(to_string(format)).append(" needs a ")
                         .append(std::to_string(rank)).append("-d shape, got ").append(to_string(shape)));
  const std::array<int, Shape::kMaxDims> order = core::memory_order(rank, format);
  Shape st = shape;
  int64_t acc = 1;
  for (int i = rank - 1; i >= 0; --i) {
    st[order[i]] = acc;
    const int64_t extent = std::max<int64_t>(shape[order[i]], 1);
    acc = sizes::mul(acc, extent, op, [&] { return "the strides of " + to_string(shape); });
  }
  return st;
}

Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  Tensor t = empty(shape, dtype, device);
  if (format != MemoryFormat::contiguous) t.impl()->strides = memory_format_strides(shape, format, "empty");
  return t;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::contiguous) return is_contiguous();
  if (ndim() != format_rank(format)) return false;
  const std::array<int, Shape::kMaxDims> order = core::memory_order(ndim(), format);
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    const int d = order[i];
    if (shape()[d] != 1 && strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  for (MemoryFormat f : {MemoryFormat::channels_last, MemoryFormat::channels_last_3d})
    if (ndim() == format_rank(f) && is_contiguous(f) && !is_contiguous()) return f;
  return MemoryFormat::contiguous;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape()[i] != 1 && strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

Tensor Tensor::grad() const { return impl_->grad; }

void Tensor::set_grad(Tensor g) const {
  if (!defined()) throw StateError("Tensor::set_grad: undefined tensor");
  if (g.defined()) detail::check_grad(*this, g, "Tensor::set_grad");
  impl_->grad = std::move(g);
}

namespace detail {

namespace {
std::string describe(const Tensor& t) { return std::string(to_string(t.dtype())) + to_string(t.shape()); }
}  // namespace

bool is_non_overlapping(const Tensor& t) {
  std::array<std::pair<int64_t, int64_t>, Shape::kMaxDims> dims;  // (stride, extent)
  int n = 0;
  for (int d = 0; d < t.ndim(); ++d) {
    if (t.shape()[d] == 0) return true;  // no elements, nothing to overlap
    if (t.shape()[d] > 1) dims[n++] = {t.strides()[d], t.shape()[d]};
  }
  for (int i = 1; i < n; ++i)  // insertion sort by stride: at most 8 dims
    for (int j = i; j > 0 && dims[j].first < dims[j - 1].first; --j) std::swap(dims[j], dims[j - 1]);
  int64_t reach = 0;  // farthest offset the dims sorted so far can reach
  for (int i = 0; i < n; ++i) {
    const auto [stride, extent] = dims[i];
    if (stride <= reach) return false;
    int64_t step;  // checked: a hand-built TensorImpl may carry any strides
    if (__builtin_mul_overflow(stride, extent - 1, &step) || __builtin_add_overflow(reach, step, &reach)) return false;
  }
  return true;
}

void check_grad(const Tensor& t, const Tensor& g, const char* op) {
  if (!t.defined()) throw StateError(std::string(op) + ": undefined tensor");
  if (!is_floating_point(t.dtype()))
    throw DTypeError(std::string(op) + ": only floating tensors have gradients, got a " + describe(t) + " tensor");
  if (!is_floating_point(g.dtype()))
    throw DTypeError(std::string(op) + ": gradient " + describe(g) + " for a " + describe(t) +
                     " tensor; gradients must be floating");
  if (g.shape() != t.shape())
    throw ShapeError(std::string(op) + ": gradient " + describe(g) + " for a " + describe(t) +
                     " tensor; the shapes must match");
  if (g.device() != t.device())
    throw DeviceError(std::string(op) + ": gradient on " + to_string(g.device()) + " for a " + describe(t) +
                      " tensor on " + to_string(t.device()));
  if (!is_non_overlapping(g))
    throw ShapeError(std::string(op) + ": gradient " + describe(g) + " with strides " + to_string(g.strides()) +
                     " is a view whose elements overlap (a broadcast?); it cannot be accumulated into");
}

void throw_data_type_mismatch(DType have, DType want) {
  throw DTypeError("Tensor::data: tensor holds " + std::string(to_string(have)) + ", asked for " +
                   std::string(to_string(want)));
}

void check_host_access(const Tensor& t, const char* what) {
  if (!t.device().is_cpu())
    throw DeviceError(std::string("Tensor::") + what + ": tensor is on " + to_string(t.device()) +
                      "; copy it with .to(Device::cpu()) first");
}

double element_as_double(const Tensor& t, int64_t i) {
  return visit_dtype(t.dtype(), [&]<class T>() { return static_cast<double>(static_cast<const T*>(t.raw_data())[i]); });
}

// One loop per source dtype, through double as element_as_double goes (the
// same values), instead of a dtype switch per element.
template <class T>
void convert_elements(const Tensor& c, T* out) {
  if (c.numel() == 0) return;
  check_host_access(c, "to_vector");
  visit_dtype(c.dtype(), [&]<class S>() {
    const S* p = static_cast<const S*>(c.raw_data());
    const int64_t n = c.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(p[i]));
  });
}
template void convert_elements(const Tensor&, float*);
template void convert_elements(const Tensor&, double*);
template void convert_elements(const Tensor&, half*);
template void convert_elements(const Tensor&, bfloat16*);
template void convert_elements(const Tensor&, int32_t*);
template void convert_elements(const Tensor&, int64_t*);
template void convert_elements(const Tensor&, bool*);
template void convert_elements(const Tensor&, int8_t*);
template void convert_elements(const Tensor&, uint8_t*);

}  // namespace detail

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  os << "Tensor(shape=" << t.shape() << ", dtype=" << t.dtype() << ", device=" << t.device() << ")\n";
  const std::vector<double> v = t.to_vector<double>();
  const int64_t last = t.ndim() ? t.shape()[t.ndim() - 1] : 1;
  constexpr size_t kMaxShown = 64;
  os << std::setprecision(6);
  for (size_t i = 0; i < v.size() && i < kMaxShown; ++i) {
    os << v[i] << ((last > 0 && (i + 1) % last == 0) ? "\n" : " ");
  }
  if (v.size() > kMaxShown) os << "... (" << v.size() << " elements)\n";
  return os;
}

}  // namespace mixgrad
