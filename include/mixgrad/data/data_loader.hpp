// mixgrad/data/data_loader.hpp — batches of a dataset, one epoch per loop.
//
//   mg::data::FashionMNIST train;
//   mg::data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0});
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (const auto& [x, y] : loader) {   // x: [128, 1, 28, 28], y: [128]
//       ...
//     }
//
// Each begin() starts an epoch: with shuffle, the order is a permutation
// drawn from (seed, epoch number), so every run with the same seed sees the
// same batches and every epoch a different order. Batches are contiguous
// copies; the last partial batch is kept unless drop_last.
//
// The loader knows how far an epoch got: position() is where a resumed run
// must continue (the epoch in progress and the batches of it handed out so
// far, or the next epoch once one ended), and resume_at() makes the next
// begin() start there, skipping the batches before without loading them.
// A checkpoint (mixgrad/io/checkpoint.hpp) saves and restores it, so a run
// killed in the middle of an epoch continues with the very next batch.
//
// With `.device = Device::cuda(0)` the loader hands out batches already on
// that device: each batch is assembled on the host and copied through the
// CUDA backend's pinned staging buffers, asynchronously on the device's
// current stream (the step's kernels queue behind the copy; the host does
// not wait for it).
//
//   mg::data::DataLoader gpu_loader(train, {.batch_size = 128, .shuffle = true, .device = mg::Device::cuda(0)});
#pragma once

#include <concepts>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "mixgrad/data/dataset.hpp"

namespace mixgrad::data {

/// Where an epoch stands: `batch` batches of epoch `epoch` were handed out.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const LoaderPosition&) const = default;
};

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  /// Seed of the shuffling; when unset, drawn once from the global generator
  /// (so mg::manual_seed makes it reproducible too).
  std::optional<uint64_t> seed = std::nullopt;
  /// Device the batches are handed out on (CPU: as the dataset makes them).
  /// A CUDA device that does not exist is a DeviceError at construction.
  Device device = Device::cpu();
};

class DataLoader {
 public:
  class Iterator;

  /// Keeps a copy of `dataset` (datasets hold tensor handles: the copy shares
  /// their memory). Throws ValueError for batch_size < 1 and DeviceError
  /// for a CUDA device this process cannot use.
  template <std::derived_from<Dataset> D>
  explicit DataLoader(D dataset, const DataLoaderOptions& options = {})
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<D>(std::move(dataset))), options) {}
  explicit DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options = {});

  /// Starts the next epoch (shuffling its order) and returns its first batch.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  /// Batches per epoch.
  int64_t size() const;
  /// The epoch the next begin() starts (0 for the first).
  int64_t epoch() const { return epoch_; }
  /// Sets the epoch the next begin() starts, from its first batch (ValueError
  /// for a negative epoch).
  void set_epoch(int64_t epoch);
  /// Where a run resumed from here must continue: while an epoch is being
  /// iterated and has batches left, that epoch and the number of its batches
  /// handed out (the batch a loop body holds counts as handed out); otherwise
  /// {epoch(), 0}.
  LoaderPosition position() const;
  /// Makes the next begin() start epoch `p.epoch` at its batch `p.batch`
  /// (0 <= p.batch <= size(); the batches before are skipped, not loaded);
  /// later begin()s start whole epochs. ValueError, nothing changed, for a
  /// position out of range.
  void resume_at(LoaderPosition p);
  /// The seed of the shuffling (options().seed, or the one drawn at construction).
  uint64_t seed() const { return seed_; }
  /// Replaces the seed of the shuffling, e.g. when resuming from a checkpoint.
  void set_seed(uint64_t seed) { seed_ = seed; }
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  /// The sample order of epoch `epoch` >= 0 (the identity without shuffle).
  std::vector<int64_t> order(int64_t epoch) const;

  /// An input iterator over one epoch's batches.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;

    Iterator() = default;
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return pos_ >= end_; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order, int64_t first_batch,
             uint64_t run);
    void load();

    DataLoader* loader_ = nullptr;
    uint64_t run_ = 0;  // which begin() made this iterator: only the latest reports its position
    std::shared_ptr<const std::vector<int64_t>> order_;
    int64_t pos_ = 0;  // position in order_ of the current batch's first sample
    int64_t end_ = 0;  // samples used this epoch; the iterator is done when pos_ >= end_
    Batch batch_;
  };

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
  int64_t skip_ = 0;        // batches the next begin() skips (resume_at)
  uint64_t run_ = 0;        // begin()s so far
  bool in_epoch_ = false;   // the latest begin()'s epoch has batches left
  int64_t handed_ = 0;      // batches of it handed out
};

}  // namespace mixgrad::data
