#include "mixgrad/nn/rotary_embedding.hpp"

#include <cmath>
#include <sstream>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/rotary_embedding.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

namespace {

/// cos and sin of position * base^(-2i / head_dim), [positions, head_dim/2],
/// in double: the float32 tables are then exact to rounding at every
/// position, where a float32 angle (position * frequency) would lose digits
/// at large positions.
std::pair<std::vector<double>, std::vector<double>> angle_tables(int64_t head_dim, double base, int64_t positions) {
  const int64_t half = head_dim / 2;
  std::vector<double> c(static_cast<size_t>(positions * half)), s(c.size());
  for (int64_t i = 0; i < half; ++i) {
    const double frequency = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    for (int64_t p = 0; p < positions; ++p) {
      const double angle = static_cast<double>(p) * frequency;
      c[p * half + i] = std::cos(angle);
      s[p * half + i] = std::sin(angle);
    }
  }
  return {std::move(c), std::move(s)};
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, const RotaryEmbeddingOptions& options)
    : head_dim_(head_dim), options_(options) {
  if (head_dim < 2 || head_dim % 2 != 0)
    throw ValueError("RotaryEmbedding: head_dim must be positive and even (its halves are paired), got " +
                     std::to_string(head_dim));
  if (!(std::isfinite(options.base) && options.base > 1))
    throw ValueError("RotaryEmbedding: base must be finite and > 1, got " + std::to_string(options.base));
  if (options.max_positions < 1)
    throw ValueError("RotaryEmbedding: max_positions must be >= 1, got " + std::to_string(options.max_positions));
}

void RotaryEmbedding::check_positions(int64_t offset, int64_t length, const std::string& what) const {
  if (offset < 0) throw ValueError(describe() + ": offset must be >= 0, got " + std::to_string(offset) + what);
  if (length > options_.max_positions - offset)
    throw ShapeError(describe() + ": positions " + std::to_string(offset) + " to " +
                     std::to_string(offset + length - 1) + " reach past max_positions = " +
                     std::to_string(options_.max_positions) + what);
}

void RotaryEmbedding::check_input(const char* name, const Tensor& x, int64_t offset) const {
  core::check_defined("RotaryEmbedding", {&x});
  const std::string of = std::string(" (") + name + " " + core::describe(x) + ")";
  if (!is_floating_point(x.dtype())) throw DTypeError(describe() + ": " + name + " must be floating" + of);
  if (x.ndim() != 4 || x.size(3) != head_dim_)
    throw ShapeError(describe() + ": " + name + " must be [B, H, T, " + std::to_string(head_dim_) + "]" + of);
  check_positions(offset, x.size(2), of);
}

const RotaryEmbedding::Cached& RotaryEmbedding::cached(Device device, DType dtype) {
  for (const Cached& c : cache_)
    if (c.device == device && c.dtype == dtype) return c;
  const auto [c, s] = angle_tables(head_dim_, options_.base, options_.max_positions);
  const Shape shape{options_.max_positions, head_dim_ / 2};
  cache_.push_back({device, dtype, tensor(c, shape, dtype).to(device), tensor(s, shape, dtype).to(device)});
  return cache_.back();
}

std::pair<Tensor, Tensor> RotaryEmbedding::tables(int64_t offset, int64_t length, Device device, DType dtype) {
  if (dtype != DType::float32 && dtype != DType::float64)
    throw DTypeError(describe() + ": tables are float32 or float64, not " + std::string(to_string(dtype)));
  if (length < 0) throw ValueError(describe() + ": length must be >= 0, got " + std::to_string(length));
  check_positions(offset, length, "");
  const Cached& c = cached(device, dtype);
  return {F::narrow(c.cos, 0, offset, length), F::narrow(c.sin, 0, offset, length)};
}

Tensor RotaryEmbedding::rotate(const Tensor& x, int64_t offset) {
  check_input("x", x, offset);
  const DType table_dtype = x.dtype() == DType::float64 ? DType::float64 : DType::float32;
  const auto [cos, sin] = tables(offset, x.size(2), x.device(), table_dtype);
  return F::rotary_embedding(x, cos, sin);
}

std::pair<Tensor, Tensor> RotaryEmbedding::operator()(const Tensor& q, const Tensor& k, int64_t offset) {
  check_input("q", q, offset);
  check_input("k", k, offset);
  return {rotate(q, offset), rotate(k, offset)};
}

std::string RotaryEmbedding::describe() const {
  std::ostringstream s;
  s << "RotaryEmbedding(head_dim=" << head_dim_ << ", base=" << options_.base
    << ", max_positions=" << options_.max_positions << ")";
  return s.str();
}

}  // namespace mixgrad::nn
