// mixgrad/data/dataset.hpp — what a DataLoader draws batches from.
//
// A Dataset has size() samples and gathers any of them into one Batch of
// contiguous tensors. TensorDataset is the in-memory one: sample i is row i
// of an inputs tensor and of a labels tensor.
//
//   mg::data::TensorDataset ds(mg::normal({1000, 20}), mg::arange(1000));
//   ds.size();                                  // 1000
//   auto b = ds.get_batch(std::vector<int64_t>{3, 1, 4});
//   b.images.shape();                           // [3, 20]
//   auto first = ds.narrow(0, 100);             // the first 100 samples (shares memory)
#pragma once

#include <cstdint>
#include <span>

#include "mixgrad/tensor.hpp"

namespace mixgrad::data {

/// A batch of samples: inputs stacked along a new first dim, and their labels.
struct Batch {
  Tensor images;
  Tensor labels;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of samples.
  virtual int64_t size() const = 0;
  /// The samples at `indices`, in that order, as contiguous tensors that own
  /// their memory. Throws ShapeError for an index outside [0, size()).
  virtual Batch get_batch(std::span<const int64_t> indices) const = 0;
};

class TensorDataset : public Dataset {
 public:
  /// Sample i is images[i] and labels[i]; both must have the same first
  /// extent (ShapeError) and live on the CPU (DeviceError).
  TensorDataset(Tensor images, Tensor labels);

  int64_t size() const override { return images_.shape()[0]; }
  /// Gathers rows (in parallel for large batches).
  Batch get_batch(std::span<const int64_t> indices) const override;

  /// `length` samples starting at `start`, sharing this dataset's memory.
  TensorDataset narrow(int64_t start, int64_t length) const;

  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

 private:
  Tensor images_;  // contiguous
  Tensor labels_;  // contiguous
};

}  // namespace mixgrad::data
