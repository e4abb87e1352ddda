#include "mixgrad/shape.hpp"

#include "core/sizes.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad {

namespace {
void check_ndim(size_t n) {
  if (n > static_cast<size_t>(Shape::kMaxDims))
    throw ShapeError("Shape: " + std::to_string(n) + " dimensions, at most " + std::to_string(Shape::kMaxDims) +
                     " are supported");
}
}  // namespace

Shape::Shape(std::initializer_list<int64_t> dims) {
  check_ndim(dims.size());
  for (int64_t d : dims) dims_[ndim_++] = d;
}

Shape::Shape(std::span<const int64_t> dims) {
  check_ndim(dims.size());
  for (int64_t d : dims) dims_[ndim_++] = d;
}

int64_t Shape::at(int i) const {
  const int j = i < 0 ? i + ndim_ : i;
  if (j < 0 || j >= ndim_)
    throw ShapeError("Shape::at: dimension " + std::to_string(i) + " out of range for " + to_string(*this));
  return dims_[j];
}

int64_t Shape::numel() const {
  int64_t n;
  if (!sizes::span(*this, n)) [[unlikely]]
    throw ShapeError("Shape::numel: " + to_string(*this) + " has more elements than fit in int64");
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] == 0) return 0;
  return n;
}

void Shape::push_back(int64_t d) {
  check_ndim(ndim_ + 1);
  dims_[ndim_++] = d;
}

void Shape::insert(int pos, int64_t d) {
  check_ndim(ndim_ + 1);
  for (int i = ndim_; i > pos; --i) dims_[i] = dims_[i - 1];
  dims_[pos] = d;
  ++ndim_;
}

void Shape::erase(int pos) {
  for (int i = pos; i + 1 < ndim_; ++i) dims_[i] = dims_[i + 1];
  --ndim_;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string to_string(const Shape& s) {
  std::string r = "[";
  for (int i = 0; i < s.ndim(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << to_string(s); }

int normalize_axis(int axis, int ndim, const char* op) {
  const int a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " out of range for a " +
                     std::to_string(ndim) + "-d tensor");
  return a;
}

Shape contiguous_strides(const Shape& s) {
  Shape st = s;
  int64_t acc = 1;
  for (int i = s.ndim() - 1; i >= 0; --i) {
    st[i] = acc;
    if (i > 0) acc = sizes::mul(acc, s[i], "contiguous_strides", [&] { return "the strides of " + to_string(s); });
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - a.ndim());
    const int ib = i - (n - b.ndim());
    const int64_t da = ia >= 0 ? a[ia] : 1;
    const int64_t db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": shapes " + to_string(a) + " and " + to_string(b) +
                       " cannot be broadcast together");
    out.push_back(da == 1 ? db : da);
  }
  sizes::numel(out, op);  // two empty operands can broadcast to a shape too large to count
  return out;
}

}  // namespace mixgrad
