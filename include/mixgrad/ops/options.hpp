// mixgrad/ops/options.hpp — small value types shared by op signatures.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace mixgrad {

/// A pair of extents (height, width); an integer means the same for both,
/// so `.padding = 1` and `.padding = {1, 2}` both read naturally.
struct Size2 {
  int64_t h = 0;
  int64_t w = 0;
  constexpr Size2() = default;
  constexpr Size2(int64_t v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor)
  constexpr Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  constexpr bool operator==(const Size2&) const = default;
};

/// Three extents (depth, height, width) for the 3-d ops; an integer means
/// the same for all three.
struct Size3 {
  int64_t d = 0;
  int64_t h = 0;
  int64_t w = 0;
  constexpr Size3() = default;
  constexpr Size3(int64_t v) : d(v), h(v), w(v) {}  // NOLINT(google-explicit-constructor)
  constexpr Size3(int64_t d_, int64_t h_, int64_t w_) : d(d_), h(h_), w(w_) {}
  constexpr bool operator==(const Size3&) const = default;
};

/// The axes a reduction runs over: `{}` (default) means all axes, an integer
/// one axis, a braced list several. Negative axes count from the back.
class Axes {
 public:
  Axes() = default;
  Axes(int axis) : axes_{axis} {}  // NOLINT(google-explicit-constructor)
  Axes(std::initializer_list<int> axes) : axes_(axes) {}
  Axes(std::vector<int> axes) : axes_(std::move(axes)) {}  // NOLINT(google-explicit-constructor)
  bool all() const { return axes_.empty(); }
  const std::vector<int>& list() const { return axes_; }

 private:
  std::vector<int> axes_;
};

/// How a loss combines its per-element values.
enum class Reduction : uint8_t { mean, sum, none };

}  // namespace mixgrad
