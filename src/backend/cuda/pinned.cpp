// The pinned staging pool of pinned.hpp: per device, a list of buffers, each
// with the event recorded after the last copy that read it. Sizes are
// rounded up to a power of two from 1 MiB, so a steady stream of same-sized
// batches reuses a handful of buffers. The pool is never destroyed: freeing
// pinned memory at process exit can run after the driver has shut down.
#include "backend/cuda/pinned.hpp"

#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/host_sync.hpp"

namespace mixgrad::backend::cuda {

namespace {

constexpr size_t kMinStagingBytes = size_t{1} << 20;

struct Slot {
  void* ptr = nullptr;
  size_t bytes = 0;
  cudaEvent_t done = nullptr;
  bool in_use = false;    // handed out, not yet released
  bool recorded = false;  // `done` marks its last copy
  uint64_t last_use = 0;
};

struct Pool {
  std::mutex mutex;
  std::map<int, std::vector<Slot>> slots;
  uint64_t clock = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed (see above)
  return *p;
}

size_t round_up(size_t bytes) {
  size_t b = kMinStagingBytes;
  while (b < bytes) b <<= 1;
  return b;
}

bool idle(const Slot& s) {
  if (s.in_use) return false;
  if (!s.recorded) return true;
  const cudaError_t st = cudaEventQuery(s.done);
  if (st == cudaSuccess) return true;
  if (st != cudaErrorNotReady) throw_cuda_error(st, "cudaEventQuery", __FILE__, __LINE__);
  return false;
}

}  // namespace

StagingBuffer acquire_staging(int device, size_t bytes) {
  Pool& p = pool();
  const std::lock_guard lock(p.mutex);
  std::vector<Slot>& slots = p.slots[device];
  const size_t want = round_up(bytes);
  int best = -1;
  size_t held = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    held += slots[i].bytes;
    if (slots[i].bytes >= want && (best < 0 || slots[i].bytes < slots[static_cast<size_t>(best)].bytes) &&
        idle(slots[i]))
      best = static_cast<int>(i);
  }
  DeviceGuard guard(device);
  if (best < 0) {
    // At the cap: wait for the least recently used buffer that is not handed
    // out and free it (or reuse it when it is large enough).
    while (held + want > kStagingPoolBytes) {
      int oldest = -1;
      for (size_t i = 0; i < slots.size(); ++i)
        if (!slots[i].in_use && slots[i].ptr != nullptr && (oldest < 0 || slots[i].last_use < slots[static_cast<size_t>(oldest)].last_use))
          oldest = static_cast<int>(i);
      if (oldest < 0) break;  // every buffer is handed out: go over the cap
      Slot& s = slots[static_cast<size_t>(oldest)];
      if (s.recorded) {
        note_host_sync("the pinned staging pool");
        MIXGRAD_CUDA_CHECK(cudaEventSynchronize(s.done));
        s.recorded = false;
      }
      if (s.bytes >= want) {
        best = oldest;
        break;
      }
      // Freed in place: handed-out buffers keep their slot numbers.
      MIXGRAD_CUDA_CHECK(cudaFreeHost(s.ptr));
      held -= s.bytes;
      s.ptr = nullptr;
      s.bytes = 0;
    }
  }
  if (best < 0) {
    for (size_t i = 0; i < slots.size() && best < 0; ++i)
      if (slots[i].ptr == nullptr && !slots[i].in_use) best = static_cast<int>(i);
    if (best < 0) {
      Slot fresh;
      MIXGRAD_CUDA_CHECK(cudaEventCreateWithFlags(&fresh.done, cudaEventDisableTiming));
      slots.push_back(fresh);
      best = static_cast<int>(slots.size() - 1);
    }
    Slot& s = slots[static_cast<size_t>(best)];
    MIXGRAD_CUDA_CHECK(cudaHostAlloc(&s.ptr, want, cudaHostAllocPortable));
    s.bytes = want;
    s.recorded = false;
  }
  Slot& s = slots[static_cast<size_t>(best)];
  s.in_use = true;
  s.last_use = ++p.clock;
  return {s.ptr, s.bytes, device, best};
}

void release_staging(const StagingBuffer& b, cudaStream_t stream) {
  Pool& p = pool();
  const std::lock_guard lock(p.mutex);
  Slot& s = p.slots[b.device][static_cast<size_t>(b.slot)];
  DeviceGuard guard(b.device);
  MIXGRAD_CUDA_CHECK(cudaEventRecord(s.done, stream));
  s.recorded = true;
  s.in_use = false;
}

size_t staging_pool_bytes(int device) {
  Pool& p = pool();
  const std::lock_guard lock(p.mutex);
  size_t n = 0;
  for (const Slot& s : p.slots[device]) n += s.bytes;
  return n;
}

}  // namespace mixgrad::backend::cuda
