// mixgrad/shape.hpp — the extents of a tensor, up to kMaxDims dimensions,
// stored inline (no heap allocation per op).
//
//   mg::Shape s{128, 1, 28, 28};
//   s.ndim();  s[0];  s.numel();   // 4, 128, 100352
//   mg::to_string(s);              // "[128, 1, 28, 28]"
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace mixgrad {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  Shape(const std::vector<int64_t>& dims) : Shape(std::span<const int64_t>(dims)) {}

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  /// Dimension `i`, where negative counts from the back (-1 is the last).
  int64_t at(int i) const;
  /// Product of the extents; ShapeError when it does not fit in int64 (never
  /// for a tensor's shape: empty() and the ops check every shape they make).
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  void push_back(int64_t d);
  void insert(int pos, int64_t d);
  void erase(int pos);

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

std::string to_string(const Shape& s);
std::ostream& operator<<(std::ostream& os, const Shape& s);

/// Normalises a possibly negative axis against `ndim`; throws ShapeError
/// naming `op` when out of range.
int normalize_axis(int axis, int ndim, const char* op);

/// Row-major strides (in elements) of a contiguous tensor of this shape;
/// ShapeError when one does not fit in int64.
Shape contiguous_strides(const Shape& s);

/// NumPy broadcast of two shapes; throws ShapeError naming `op` when they do
/// not broadcast or the result has more elements than fit in int64.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mixgrad
