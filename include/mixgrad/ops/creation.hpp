// mixgrad/ops/creation.hpp — factories and the random generator.
//
//   mg::manual_seed(0);
//   auto w = mg::uniform({128, 784}, -0.1, 0.1);
//   auto x = mg::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
//   auto s = mg::full_like(loss, scaler.scale_factor());
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad {

/// full: ValueError when an integer dtype cannot hold `value` (truncated
/// toward zero), e.g. 300 as int8 or -1 as uint8, as PyTorch refuses it.
Tensor zeros(const Shape& shape, DType dtype = DType::float32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::float32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::float32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
/// start, start+step, ... < end (> end for a negative step). ValueError for
/// a non-finite argument, a zero step, more than 2^53 elements, or values an
/// integer dtype cannot hold. Computed on the host and copied to `device`.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::float32,
              Device device = Device::cpu());
Tensor arange(int64_t end, DType dtype = DType::int64, Device device = Device::cpu());

/// From values in row-major order; values.size() must equal shape.numel().
/// The dtype is the values' (float -> float32, double -> float64, ...)
/// unless given.
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape);
template <class T>
Tensor tensor(std::initializer_list<T> values, const Shape& shape) {
  return tensor(std::vector<T>(values), shape);
}
Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype);
/// A 0-d tensor.
Tensor scalar(double value, DType dtype = DType::float32, Device device = Device::cpu());

/// A contiguous tensor over memory mixgrad did not allocate (zero-copy
/// interop): `data` holds shape.numel() elements of `dtype` on `device`.
/// `deleter(data)` runs when the last tensor using the memory is gone; with
/// no deleter the caller keeps the memory alive at least that long. Writes
/// through either side are seen by the other. ShapeError for a bad shape,
/// ValueError for a null `data` with elements.
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = Device::cpu(),
                 std::function<void(void*)> deleter = {});

/// Seeds the global generator: the same seed gives the same numbers
/// (uniform, normal, dropout, shuffling, initialisation) on every run.
void manual_seed(uint64_t seed);
/// Uniform in [low, high); ValueError unless low <= high, both finite.
Tensor uniform(const Shape& shape, double low = 0.0, double high = 1.0, DType dtype = DType::float32);
/// Normal(mean, std); ValueError unless mean is finite and std finite and >= 0.
Tensor normal(const Shape& shape, double mean = 0.0, double std = 1.0, DType dtype = DType::float32);

extern template Tensor tensor<float>(const std::vector<float>&, const Shape&);
extern template Tensor tensor<double>(const std::vector<double>&, const Shape&);
extern template Tensor tensor<int32_t>(const std::vector<int32_t>&, const Shape&);
extern template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&);
extern template Tensor tensor<bool>(const std::vector<bool>&, const Shape&);
extern template Tensor tensor<int8_t>(const std::vector<int8_t>&, const Shape&);
extern template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, const Shape&);

}  // namespace mixgrad
