// DistributedSampler and ShardedDataset: a shuffle every rank draws alike.
#include "mixgrad/distributed/distributed_sampler.hpp"

#include <numeric>
#include <string>

#include "mixgrad/error.hpp"

namespace mixgrad::distributed {

namespace {

// SplitMix64: small, fast and fully specified, so every platform draws the
// same stream from a seed (std::shuffle and the std distributions are not).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by rejection (no modulo bias).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }
};

void check_epoch(const char* fn, int64_t epoch) {
  if (epoch < 0) throw ValueError(std::string(fn) + ": epoch must be >= 0, got " + std::to_string(epoch));
}

}  // namespace

DistributedSampler::DistributedSampler(int rank, int world_size, int64_t size, const SamplerOptions& options)
    : rank_(rank), world_size_(world_size), size_(size), options_(options) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw ValueError("DistributedSampler: rank " + std::to_string(rank) + " is not in a world of " +
                     std::to_string(world_size));
  if (size < 0) throw ValueError("DistributedSampler: negative data set size " + std::to_string(size));
}

std::vector<int64_t> DistributedSampler::order(int64_t epoch) const {
  check_epoch("DistributedSampler::order", epoch);
  std::vector<int64_t> p(static_cast<size_t>(size_));
  std::iota(p.begin(), p.end(), int64_t{0});
  if (options_.shuffle) {
    SplitMix64 rng{options_.seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(epoch + 1))};
    for (int64_t i = size_ - 1; i > 0; --i) std::swap(p[i], p[rng.below(static_cast<uint64_t>(i + 1))]);
  }
  return p;
}

int64_t DistributedSampler::num_samples() const {
  return options_.drop_last ? size_ / world_size_ : (size_ + world_size_ - 1) / world_size_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  check_epoch("DistributedSampler::indices", epoch);
  std::vector<int64_t> p = order(epoch);
  const int64_t total = num_samples() * world_size_;
  if (size_ > 0)  // pad with the order's own first samples
    for (int64_t i = 0; static_cast<int64_t>(p.size()) < total; ++i) p.push_back(p[i % size_]);
  p.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples()));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(p[i]);
  return mine;
}

ShardedDataset::ShardedDataset(std::shared_ptr<const data::Dataset> base, DistributedSampler sampler)
    : base_(std::move(base)), sampler_(std::move(sampler)) {
  if (!base_) throw ValueError("ShardedDataset: null data set");
  if (base_->size() != sampler_.size())
    throw ValueError("ShardedDataset: the sampler is for " + std::to_string(sampler_.size()) +
                     " samples, the data set has " + std::to_string(base_->size()));
  indices_ = sampler_.indices(0);
}

void ShardedDataset::set_epoch(int64_t epoch) {
  check_epoch("ShardedDataset::set_epoch", epoch);
  indices_ = sampler_.indices(epoch);
  epoch_ = epoch;
}

data::Batch ShardedDataset::get_batch(std::span<const int64_t> indices) const {
  std::vector<int64_t> mapped(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t k = indices[i];
    if (k < 0 || k >= size())
      throw ShapeError("ShardedDataset::get_batch: index " + std::to_string(k) + " outside [0, " +
                       std::to_string(size()) + ")");
    mapped[i] = indices_[static_cast<size_t>(k)];
  }
  return base_->get_batch(mapped);
}

}  // namespace mixgrad::distributed
