// mixgrad/distributed/distributed_sampler.hpp — each rank's share of a data set.
//
//   auto group = mg::distributed::init_process_group();
//   mg::data::FashionMNIST train;
//   auto shard = std::make_shared<mg::distributed::ShardedDataset>(
//       std::make_shared<mg::data::FashionMNIST>(train),
//       mg::distributed::DistributedSampler(group.rank(), group.world_size(), train.size(), {.seed = 7}));
//   mg::data::DataLoader loader(shard, {.batch_size = 64});    // no shuffle here: the sampler shuffles
//   for (int epoch = 0; epoch < 3; ++epoch) {
//     shard->set_epoch(epoch);                                 // a new order, the same on every rank
//     for (const auto& [x, y] : loader) ...                    // this rank's 1/world_size of the samples
//   }
//
// Epoch e's order is a permutation of [0, size) drawn from (seed, e) by a
// Fisher-Yates shuffle on a SplitMix64 stream written out here, so every
// rank, on every machine and standard library, draws the same one (the seed
// must be the same on every rank: pass it, do not draw it). Rank r takes
// positions r, r + world_size, r + 2 world_size, ... of it. Unless
// drop_last, the order is padded with its own first samples up to a
// multiple of world_size, so every rank has the same number of samples
// (and of batches: ranks must run the same number of steps); with
// drop_last the tail that does not divide evenly is left out.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mixgrad/data/dataset.hpp"

namespace mixgrad::distributed {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  /// ValueError unless 0 <= rank < world_size and size >= 0.
  DistributedSampler(int rank, int world_size, int64_t size, const SamplerOptions& options = {});

  /// Rank's sample indices of epoch `epoch` >= 0 (ValueError otherwise).
  std::vector<int64_t> indices(int64_t epoch) const;
  /// The full permutation of epoch `epoch`, before sharding.
  std::vector<int64_t> order(int64_t epoch) const;
  /// Samples per rank per epoch.
  int64_t num_samples() const;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t size() const { return size_; }
  const SamplerOptions& options() const { return options_; }

 private:
  int rank_;
  int world_size_;
  int64_t size_;
  SamplerOptions options_;
};

/// A data set of one rank's samples of `base` for the current epoch: sample
/// i is base's sample sampler.indices(epoch)[i]. Give it to a DataLoader
/// without shuffle; call set_epoch at the start of every epoch.
class ShardedDataset : public data::Dataset {
 public:
  /// ValueError if sampler.size() != base->size().
  ShardedDataset(std::shared_ptr<const data::Dataset> base, DistributedSampler sampler);

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  data::Batch get_batch(std::span<const int64_t> indices) const override;

  /// Draws epoch `epoch`'s share (ValueError for a negative epoch).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  const DistributedSampler& sampler() const { return sampler_; }

 private:
  std::shared_ptr<const data::Dataset> base_;
  DistributedSampler sampler_;
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace mixgrad::distributed
