// Page-locked (pinned) staging buffers for host <-> device copies. A copy
// from pageable memory makes the CUDA runtime stage the bytes itself and
// return only once they are staged, at the pageable copy engine's rate;
// copying into a pinned buffer first lets the DMA run at full rate while
// the host goes on, and lets the caller free or reuse its own memory at
// once (the bytes are already in the staging buffer when transfer returns).
// A buffer goes back to the pool with an event recorded after its copy and
// is handed out again only once that event has completed: no host wait on
// the copy path unless the pool is at its cap.
//
//   StagingBuffer s = acquire_staging(device, bytes);
//   std::memcpy(s.ptr, host, bytes);
//   cudaMemcpyAsync(dst, s.ptr, bytes, cudaMemcpyHostToDevice, stream);
//   release_staging(s, stream);   // reusable once the copy has run
//
// Device-to-host copies use the same pool: cudaMemcpyAsync into the buffer,
// synchronise the stream, memcpy out, release (the buffer is free at once).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace mixgrad::backend::cuda {

/// Largest copy staged (larger ones go through the runtime's own staging).
inline constexpr size_t kMaxStagedBytes = size_t{64} << 20;
/// Pinned memory kept per device; at the cap, acquire waits for the oldest copy.
inline constexpr size_t kStagingPoolBytes = size_t{256} << 20;

struct StagingBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  int device = 0;
  int slot = -1;
};

/// A pinned buffer of at least `bytes` (<= kMaxStagedBytes) for a copy to or from `device`.
StagingBuffer acquire_staging(int device, size_t bytes);

/// Returns `s` to the pool once the work queued on `stream` so far (its copy) has run.
void release_staging(const StagingBuffer& s, cudaStream_t stream);

/// Pinned bytes the pool holds on `device` (for tests and diagnostics).
size_t staging_pool_bytes(int device);

}  // namespace mixgrad::backend::cuda
