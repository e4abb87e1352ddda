#include "mixgrad/data/data_loader.hpp"

#include <numeric>
#include <span>
#include <string>
#include <utility>

#include "kernels/philox.hpp"
#include "mixgrad/cuda.hpp"
#include "core/random_state.hpp"

namespace mixgrad::data {

namespace {

// A seed for the shuffling from the global generator: one counter of it.
uint64_t seed_from_global_generator() {
  const auto r = kernels::philox(random_state::seed(), random_state::reserve(1));
  return (uint64_t{r[0]} << 32) | r[1];
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options) {
  if (!dataset_) throw StateError("DataLoader: null dataset");
  if (options_.batch_size < 1)
    throw ValueError("DataLoader: batch_size must be >= 1, got " + std::to_string(options_.batch_size));
  if (options_.device.is_cuda() && options_.device.index() >= cuda::device_count())
    throw DeviceError("DataLoader: batches were asked for on " + to_string(options_.device) + ", but " +
                      (cuda::device_count() == 0 ? std::string("this process sees no CUDA device")
                                                 : "only " + std::to_string(cuda::device_count()) +
                                                       " CUDA device(s) exist") +
                      (cuda::is_built() ? "" : " (mixgrad was built without its CUDA backend)"));
  seed_ = options_.seed ? *options_.seed : seed_from_global_generator();
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size(), b = options_.batch_size;
  // Not (n + b - 1) / b: that overflows for a batch_size near INT64_MAX.
  return n / b + (!options_.drop_last && n % b != 0 ? 1 : 0);
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch < 0) throw ValueError("DataLoader::set_epoch: epoch must be >= 0, got " + std::to_string(epoch));
  epoch_ = epoch;
  skip_ = 0;
  in_epoch_ = false;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  const int64_t n = dataset_->size();
  if (n < 0) throw ShapeError("DataLoader: the dataset reports a negative size " + std::to_string(n));
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  if (!options_.shuffle) return idx;
  // Fisher-Yates with counter-based draws: counter (epoch, i), so an epoch's
  // order depends only on the seed and the epoch number.
  if (epoch < 0) throw ValueError("DataLoader::order: epoch must be >= 0, got " + std::to_string(epoch));
  const uint64_t base = static_cast<uint64_t>(epoch) << 32;
  for (size_t i = idx.size(); i > 1; --i) {
    const auto r = kernels::philox(seed_, base + i);
    const double u = kernels::unit_double(r[0], r[1]);
    const size_t j = std::min(i - 1, static_cast<size_t>(u * static_cast<double>(i)));
    std::swap(idx[i - 1], idx[j]);
  }
  return idx;
}

LoaderPosition DataLoader::position() const {
  if (in_epoch_) return {epoch_ - 1, handed_};
  return {epoch_, skip_};
}

void DataLoader::resume_at(LoaderPosition p) {
  if (p.epoch < 0 || p.batch < 0 || p.batch > size())
    throw ValueError("DataLoader::resume_at: position (epoch " + std::to_string(p.epoch) + ", batch " +
                     std::to_string(p.batch) + ") is out of range: the epoch must be >= 0 and the batch in [0, " +
                     std::to_string(size()) + "]");
  epoch_ = p.epoch;
  skip_ = p.batch;
  in_epoch_ = false;
}

DataLoader::Iterator DataLoader::begin() {
  auto ord = std::make_shared<const std::vector<int64_t>>(order(epoch_));
  ++epoch_;
  const int64_t first = std::exchange(skip_, 0);
  handed_ = first;
  in_epoch_ = true;
  return Iterator(this, std::move(ord), first, ++run_);
}

DataLoader::Iterator::Iterator(DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order,
                               int64_t first_batch, uint64_t run)
    : loader_(loader), run_(run), order_(std::move(order)) {
  const int64_t n = static_cast<int64_t>(order_->size());
  const int64_t b = loader_->options_.batch_size;
  end_ = loader_->options_.drop_last ? n - n % b : n;
  // first_batch <= size(), as resume_at checked; below size() it starts
  // before end_, so first_batch * b does not overflow.
  pos_ = first_batch >= loader_->size() ? end_ : first_batch * b;
  load();
}

void DataLoader::Iterator::load() {
  const bool latest = loader_->run_ == run_;
  if (pos_ >= end_) {
    batch_ = {};
    if (latest) loader_->in_epoch_ = false;
    return;
  }
  if (latest) ++loader_->handed_;
  const int64_t len = std::min(loader_->options_.batch_size, end_ - pos_);
  batch_ = loader_->dataset_->get_batch(std::span<const int64_t>(order_->data() + pos_, static_cast<size_t>(len)));
  const Device& device = loader_->options_.device;
  if (device != Device::cpu()) {
    batch_.images = batch_.images.to(device);
    batch_.labels = batch_.labels.to(device);
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  // Saturates at the end: pos_ + batch_size can overflow for a huge batch size.
  const int64_t b = loader_->options_.batch_size;
  pos_ = b >= end_ - pos_ ? end_ : pos_ + b;
  load();
  return *this;
}

}  // namespace mixgrad::data
