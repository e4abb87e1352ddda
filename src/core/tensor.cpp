#include "mixgrad/tensor.hpp"

#include <atomic>
#include <iomanip>

namespace mixgrad {

namespace {
std::atomic<uint64_t> g_next_id{1};
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> s, int64_t off, const Shape& sh, const Shape& st, DType dt)
    : storage(std::move(s)), offset(off), shape(sh), strides(st), dtype(dt),
      id(g_next_id.fetch_add(1, std::memory_order_relaxed)) {}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  for (int i = 0; i < shape.ndim(); ++i)
    if (shape[i] < 0) throw ShapeError("empty: negative extent in shape " + to_string(shape));
  auto storage = std::make_shared<Storage>(shape.numel() * element_size(dtype), device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), 0, shape, contiguous_strides(shape), dtype));
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
void Tensor::set_grad(Tensor g) const { impl_->grad = std::move(g); }

namespace detail {

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
