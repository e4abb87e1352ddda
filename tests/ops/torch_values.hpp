// What the op tests that check against numbers PyTorch printed share: small
// exact inputs (the same on both sides) and a check of a result's shape and
// values within a relative tolerance.
#pragma once

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace torch_values {

/// ((i * 7) % 11 - 5) * scale for i = 0 .. numel-1, float64: small exact values.
inline mixgrad::Tensor lin(const mixgrad::Shape& shape, double scale = 0.25) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(static_cast<int64_t>(i * 7 % 11) - 5) * scale;
  return mixgrad::tensor(v, shape, mixgrad::DType::float64);
}

/// got has `shape` and each value is want's within tol * (1 + |want|).
inline void expect(const mixgrad::Tensor& got, const mixgrad::Shape& shape, const std::vector<double>& want,
                   double tol) {
  BOOST_TEST(mixgrad::to_string(got.shape()) == mixgrad::to_string(shape));
  const auto v = test_util::values(got);
  BOOST_TEST_REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i)
    BOOST_TEST(std::abs(v[i] - want[i]) <= tol * (1 + std::abs(want[i])), i << ": " << v[i] << " vs " << want[i]);
}

}  // namespace torch_values
