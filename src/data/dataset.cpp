#include "mixgrad/data/dataset.hpp"

#include <cstring>

#include "kernels/loops.hpp"
#include "core/checks.hpp"

namespace mixgrad::data {

namespace {

// Copies row indices[i] of `src` to row i of a new tensor: one memcpy per
// row, rows split across threads when there is enough to copy.
Tensor gather_rows(const Tensor& src, std::span<const int64_t> indices) {
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = empty(shape, src.dtype(), src.device());
  const int64_t row_bytes = (src.shape()[0] ? src.numel() / src.shape()[0] : 0) * element_size(src.dtype());
  const char* from = static_cast<const char*>(src.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t grain = std::max<int64_t>(1, kernels::kParallelGrain * 4 / std::max<int64_t>(row_bytes, 1));
  kernels::parallel_for(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::memcpy(to + i * row_bytes, from + indices[i] * row_bytes, row_bytes);
  });
  return out;
}

}  // namespace

TensorDataset::TensorDataset(Tensor images, Tensor labels) {
  core::check_defined("TensorDataset", {&images, &labels});
  if (images.ndim() == 0 || labels.ndim() == 0 || images.shape()[0] != labels.shape()[0])
    throw ShapeError("TensorDataset: images " + core::describe(images) + " and labels " + core::describe(labels) +
                     " must have the same number of samples (first extent)");
  if (!images.device().is_cpu() || !labels.device().is_cpu())
    throw DeviceError("TensorDataset: images and labels must be on the CPU, got " + core::describe(images) + " and " +
                      core::describe(labels));
  images_ = images.contiguous();
  labels_ = labels.contiguous();
}

Batch TensorDataset::get_batch(std::span<const int64_t> indices) const {
  const int64_t n = size();
  for (int64_t i : indices)
    if (i < 0 || i >= n)
      throw ShapeError("TensorDataset::get_batch: index " + std::to_string(i) + " out of range for " +
                       std::to_string(n) + " samples");
  return {gather_rows(images_, indices), gather_rows(labels_, indices)};
}

TensorDataset TensorDataset::narrow(int64_t start, int64_t length) const {
  // length > size() - start, not start + length > size(): the sum can overflow.
  if (start < 0 || start > size() || length < 0 || length > size() - start)
    throw ShapeError("TensorDataset::narrow: start " + std::to_string(start) + " and length " +
                     std::to_string(length) + " out of range for " + core::describe(images_) + " (" +
                     std::to_string(size()) + " samples)");
  return TensorDataset(images_.narrow(0, start, length), labels_.narrow(0, start, length));
}

}  // namespace mixgrad::data
