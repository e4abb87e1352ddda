// The host-synchronisation counter and the capture guard (backend/host_sync.hpp).
#include "backend/host_sync.hpp"

#include <atomic>

#include "mixgrad/error.hpp"

namespace mixgrad::backend {

namespace {
std::atomic<int64_t> syncs{0};
thread_local CaptureRegion* t_region = nullptr;
}  // namespace

int64_t host_sync_count() { return syncs.load(std::memory_order_relaxed); }

void note_host_sync(const char* op) {
  if (t_region != nullptr) [[unlikely]] {
    if (t_region->refused_.empty()) t_region->refused_ = op;
    throw StateError(std::string(op)
                         .append(" synchronises the host with the device, which a CUDA graph cannot capture (")
                         .append(t_region->owner_)
                         .append(" is capturing on this thread): keep the step's values on the device"));
  }
  syncs.fetch_add(1, std::memory_order_relaxed);
}

void check_not_capturing(const char* op, const char* why) {
  if (t_region == nullptr) [[likely]]
    return;
  if (t_region->refused_.empty()) t_region->refused_ = op;
  throw StateError(std::string(op).append(" cannot be captured in a CUDA graph (").append(t_region->owner_)
                       .append(" is capturing on this thread): ").append(why));
}

const char* capturing() { return t_region != nullptr ? t_region->owner() : nullptr; }

CaptureRegion::CaptureRegion(const char* owner) : owner_(owner) {
  if (t_region != nullptr)
    throw StateError(std::string(owner).append(": cannot capture inside another capture (")
                         .append(t_region->owner()).append(") on the same thread"));
  t_region = this;
}

CaptureRegion::~CaptureRegion() { t_region = nullptr; }

}  // namespace mixgrad::backend
