// Storage and the allocator registry, with the CPU's caching allocator:
// freed blocks are kept in per-size-class free lists and handed out again.
// Size classes are powers of two and 1.5x powers of two above 4 KiB, so at
// most a third of a block is slack. A block first requested for 2 MiB or
// more starts on a 2 MiB boundary and asks the kernel for transparent huge
// pages over the 2 MiB pages that request fills (MIXGRAD_HUGE_PAGES=0 turns
// that off).
#include "mixgrad/storage.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "mixgrad/allocator.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad {

namespace {

constexpr size_t kAlignment = 64;

// n is at most INT64_MAX, so p (a power of two up to 2^63) cannot wrap.
size_t size_class(size_t n) {
  if (n <= 4096) return (n + kAlignment - 1) / kAlignment * kAlignment;
  size_t p = 4096;
  while (p < n) {
    if (p + p / 2 >= n) return p + p / 2;
    p *= 2;
  }
  return p;
}

constexpr size_t kHugePage = size_t{2} << 20;

// Large blocks are touched by whole-tensor passes (optimizer updates,
// elementwise ops, GEMM operands) that are bound by memory traffic; with
// 4 KiB pages each 2 MiB costs 512 TLB entries, which inside a virtual
// machine are walked twice. Measured (docs/notes/measurement-log.md): an O2 SGD
// step over 67M bfloat16 parameters 5-8% faster, the MLP training step
// 2-3%.
bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("MIXGRAD_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return wanted;
}

// A block of `bytes` (a size class) for a first request of `requested`
// bytes. Huge pages cover only the 2 MiB pages inside the first request,
// which it fills: a block never holds more memory than 4 KiB pages would
// once its first tensor is written.
void* allocate_block(size_t bytes, size_t requested) {
  const size_t advised = requested / kHugePage * kHugePage;
  const bool huge = advised > 0 && huge_pages_wanted();
  void* p = nullptr;
  if (posix_memalign(&p, huge ? kHugePage : kAlignment, bytes) != 0) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (huge) madvise(p, advised, MADV_HUGEPAGE);  // advice only: a refusal changes nothing
#endif
  return p;
}

class HostCache {
 public:
  void* take(size_t bytes, size_t requested) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        return p;
      }
    }
    void* p = allocate_block(bytes, requested);
    if (!p) {  // give the cached blocks back to the system and try once more
      clear();
      p = allocate_block(bytes, requested);
    }
    if (!p)
      throw OutOfMemoryError("Storage: cannot allocate " + std::to_string(bytes) +
                             " bytes on cpu: out of host memory");
    return p;
  }
  void give(void* p, size_t bytes) {
    std::lock_guard lock(mutex_);
    free_[bytes].push_back(p);
    cached_ += bytes;
  }
  void clear() {
    std::lock_guard lock(mutex_);
    for (auto& [bytes, list] : free_)
      for (void* p : list) std::free(p);
    free_.clear();
    cached_ = 0;
  }
  ~HostCache() { clear(); }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

HostCache& host_cache() {
  static HostCache* cache = new HostCache;  // outlives static tensors
  return *cache;
}

std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};

void note_alloc(int64_t n) {
  const int64_t now = g_allocated.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

class CpuAllocator final : public Allocator {
 public:
  constexpr CpuAllocator() = default;
  void* allocate(int64_t nbytes, Device) override {
    const auto n = static_cast<size_t>(std::max<int64_t>(nbytes, 1));
    void* p = host_cache().take(size_class(n), n);
    note_alloc(nbytes);
    return p;
  }
  void release(void* p, int64_t nbytes, Device) noexcept override {
    host_cache().give(p, size_class(static_cast<size_t>(std::max<int64_t>(nbytes, 1))));
    g_allocated.fetch_sub(nbytes, std::memory_order_relaxed);
  }
  void empty_cache() override { host_cache().clear(); }
};

// Constant-initialised, so that a backend may register from a static
// initialiser in any translation unit, before or after this one's; and never
// destroyed, so that tensors freed during exit still find it.
static_assert(std::is_trivially_destructible_v<CpuAllocator>);
constinit CpuAllocator g_cpu_allocator;
constexpr size_t kDeviceTypes = static_cast<size_t>(DeviceType::cuda) + 1;
constinit std::array<std::atomic<Allocator*>, kDeviceTypes> g_allocators{&g_cpu_allocator, nullptr};

std::atomic<Allocator*>& slot(DeviceType type) { return g_allocators[static_cast<size_t>(type)]; }

}  // namespace

Allocator* register_allocator(DeviceType type, Allocator* allocator) noexcept {
  return slot(type).exchange(allocator, std::memory_order_acq_rel);
}

Allocator* registered_allocator(DeviceType type) noexcept { return slot(type).load(std::memory_order_acquire); }

Storage::Storage(int64_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (nbytes < 0) throw ShapeError("Storage: negative size " + std::to_string(nbytes) + " bytes");
  // The hot path of every op's output: one load and one indirect call.
  allocator_ = slot(device.type()).load(std::memory_order_acquire);
  if (!allocator_) {
    throw DeviceError("Storage: no allocator is registered for " + to_string(device) +
                      (device.is_cuda() ? " (mixgrad was built without CUDA)" : ""));
  }
  data_ = allocator_->allocate(nbytes, device);
}

Storage::Storage(void* data, int64_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {
  if (nbytes < 0) throw ShapeError("Storage: negative size " + std::to_string(nbytes) + " bytes");
  if (!data && nbytes > 0)
    throw ValueError("Storage: null pointer for " + std::to_string(nbytes) + " bytes of external memory on " +
                     to_string(device));
}

Storage::~Storage() {
  if (allocator_) {
    allocator_->release(data_, nbytes_, device_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

void empty_cache() {
  for (auto& a : g_allocators)
    if (Allocator* p = a.load(std::memory_order_acquire)) p->empty_cache();
}
int64_t allocated_bytes() { return g_allocated.load(); }
int64_t peak_allocated_bytes() { return g_peak.load(); }
void reset_peak_allocated_bytes() { g_peak.store(g_allocated.load()); }

}  // namespace mixgrad
