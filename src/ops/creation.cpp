#include "mixgrad/ops/creation.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <memory>
#include <string>
#include <utility>

#include "backend/copy.hpp"
#include "core/random_state.hpp"
#include "core/sizes.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"
#include "kernels/philox.hpp"

namespace mixgrad {

void manual_seed(uint64_t seed) { random_state::set({.seed = seed, .counter = 0}); }

namespace {

// [lo, hi): the values (after truncation toward zero) an integer dtype holds.
std::pair<double, double> integer_range(DType dtype) {
  switch (dtype) {
    case DType::int8: return {-128.0, 128.0};
    case DType::uint8: return {0.0, 256.0};
    case DType::int32: return {-2147483648.0, 2147483648.0};
    default: return {-9223372036854775808.0, 9223372036854775808.0};
  }
}

/// Whether `value`, truncated toward zero, is one of integer `dtype`'s values.
bool fits_integer(double value, DType dtype) {
  const auto [lo, hi] = integer_range(dtype);
  const double t = std::trunc(value);  // NaN fails both comparisons
  return t >= lo && t < hi;
}

Tensor filled(const char* op, const Shape& shape, double value, DType dtype, Device device) {
  sizes::nbytes(shape, dtype, op);  // so that a bad size names the op the caller called
  if (is_integral(dtype) && !fits_integer(value, dtype))
    throw ValueError(std::string(op) + ": value " + std::to_string(value) + " does not fit " +
                     std::string(to_string(dtype)) + " (shape " + to_string(shape) + ")");
  Tensor t = empty(shape, dtype, device);
  backend::fill(t, value);
  return t;
}
}  // namespace

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  return filled("full", shape, value, dtype, device);
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return filled("zeros", shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return filled("ones", shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return full(t.shape(), 0.0, t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return full(t.shape(), 1.0, t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }
Tensor scalar(double value, DType dtype, Device device) { return full(Shape{}, value, dtype, device); }

namespace {

std::string range_text(double start, double end, double step, DType dtype) {
  return "start=" + std::to_string(start) + " end=" + std::to_string(end) + " step=" + std::to_string(step) +
         " dtype=" + std::string(to_string(dtype));
}

// The largest element count arange accepts: beyond 2^53 a double no longer
// holds every index, so neither the count nor the values would be exact.
constexpr double kMaxArangeCount = 9007199254740992.0;

// The element count of arange, validated: finite arguments, a nonzero step,
// an exactly representable count and, for integer dtypes, values in range.
int64_t arange_count(double start, double end, double step, DType dtype) {
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step) || step == 0)
    throw ValueError("arange: start, end and step must be finite and step nonzero, got " +
                     range_text(start, end, step, dtype));
  const double count = std::ceil((end - start) / step);  // may be +-inf when end - start overflows
  if (!(count <= kMaxArangeCount))
    throw ValueError("arange: " + range_text(start, end, step, dtype) + " would have " + std::to_string(count) +
                     " elements, more than 2^53");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  if (n > 0 && is_integral(dtype)) {
    const double last = start + static_cast<double>(n - 1) * step;
    if (!fits_integer(std::min(start, last), dtype) || !fits_integer(std::max(start, last), dtype))
      throw ValueError("arange: values of " + range_text(start, end, step, dtype) + " do not fit " +
                       std::string(to_string(dtype)));
  }
  return n;
}

}  // namespace

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  const int64_t n = arange_count(start, end, step, dtype);
  Tensor t = empty(Shape{n}, dtype);
  visit_dtype(dtype, [&]<class T>() {
    T* d = t.data<T>();
    for (int64_t i = 0; i < n; ++i) d[i] = kernels::cast<T>(start + static_cast<double>(i) * step);
  });
  return device.is_cpu() ? t : t.to(device);
}

Tensor arange(int64_t end, DType dtype, Device device) {
  return arange(0.0, static_cast<double>(end), 1.0, dtype, device);
}

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape) {
  const int64_t n = sizes::numel(shape, "tensor");
  if (static_cast<int64_t>(values.size()) != n)
    throw ShapeError("tensor: " + std::to_string(values.size()) + " values for shape " + to_string(shape) + " (" +
                     std::to_string(n) + " elements)");
  Tensor t = empty(shape, dtype_of<T>());
  T* d = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
  return t;
}
template Tensor tensor<float>(const std::vector<float>&, const Shape&);
template Tensor tensor<double>(const std::vector<double>&, const Shape&);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, const Shape&);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor tensor<bool>(const std::vector<bool>&, const Shape&);
template Tensor tensor<int8_t>(const std::vector<int8_t>&, const Shape&);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, const Shape&);

Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t64 = tensor<double>(values, shape);
  if (dtype == DType::float64) return t64;
  Tensor t = empty(shape, dtype);
  backend::copy(t64, t);
  return t;
}

namespace {

// Fills a contiguous tensor with gen(u1, u2), two independent uniforms per
// element drawn from the counter (first + i).
template <class Gen>
Tensor random_fill(const Shape& shape, DType dtype, const char* op, Gen gen) {
  if (!is_floating_point(dtype))
    throw DTypeError(std::string(op) + ": expected a floating dtype, got " + std::string(to_string(dtype)));
  sizes::nbytes(shape, dtype, op);  // before empty(), so that a bad size names this op
  Tensor t = empty(shape, dtype);
  const int64_t n = shape.numel();
  const uint64_t seed = random_state::seed();
  const uint64_t first = random_state::reserve(static_cast<uint64_t>(n));
  visit_floating(dtype, op, [&]<class T>() {
    T* d = t.data<T>();
    kernels::parallel_for(n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const auto r = kernels::philox(seed, first + static_cast<uint64_t>(i));
        d[i] = kernels::cast<T>(gen(kernels::unit_double(r[0], r[1]), kernels::unit_double(r[2], r[3])));
      }
    });
  });
  return t;
}

}  // namespace

Tensor uniform(const Shape& shape, double low, double high, DType dtype) {
  if (!(low <= high && std::isfinite(low) && std::isfinite(high)))
    throw ValueError("uniform: need finite low <= high, got low=" + std::to_string(low) +
                     " high=" + std::to_string(high) + " for shape " + to_string(shape));
  return random_fill(shape, dtype, "uniform", [=](double u, double) { return low + (high - low) * u; });
}

Tensor normal(const Shape& shape, double mean, double std, DType dtype) {
  if (!(std >= 0 && std::isfinite(std) && std::isfinite(mean)))
    throw ValueError("normal: need a finite mean and a finite std >= 0, got mean=" + std::to_string(mean) +
                     " std=" + std::to_string(std) + " for shape " + to_string(shape));
  return random_fill(shape, dtype, "normal", [=](double u1, double u2) {
    const double r = std::sqrt(-2.0 * std::log(1.0 - u1));  // 1-u1 in (0, 1]
    return mean + std * r * std::cos(2.0 * 3.14159265358979323846 * u2);
  });
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device, std::function<void(void*)> deleter) {
  const int64_t nbytes = sizes::nbytes(shape, dtype, "from_blob");
  auto storage = std::make_shared<Storage>(data, nbytes, device, std::move(deleter));
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), 0, shape, contiguous_strides(shape), dtype));
}

}  // namespace mixgrad
