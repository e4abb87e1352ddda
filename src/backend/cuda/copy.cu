// CUDA kernels of the copy family (backend/copy.hpp): strided copy with dtype
// conversion, fill, accumulate, and host <-> device transfer. The element
// conversions are the CPU's (kernels/cast.hpp), so both devices round the
// same way. Layout: kernels, then launchers that take a stream, then the
// checked entry points.
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "backend/copy.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/pinned.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/host_sync.hpp"
#include "backend/pending_checks.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::StridedIndexer;

// ---- kernels: grid-stride loops over the linear index -------------------

template <class From, class To>
__global__ void convert_kernel(StridedIndexer<2> ix, char* dst, const char* src, int64_t n) {
  MIXGRAD_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    *reinterpret_cast<To*>(dst + off[0]) = kernels::cast<To>(*reinterpret_cast<const From*>(src + off[1]));
  }
}

template <class T>
__global__ void fill_kernel(StridedIndexer<1> ix, char* dst, T value, int64_t n) {
  MIXGRAD_GRID_STRIDE_LOOP(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    *reinterpret_cast<T*>(dst + off[0]) = value;
  }
}

template <class From, class To>
__global__ void accumulate_kernel(StridedIndexer<2> ix, char* dst, const char* src, int64_t n) {
  using Acc = kernels::compute_t<To>;
  MIXGRAD_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    To& d = *reinterpret_cast<To*>(dst + off[0]);
    const From s = *reinterpret_cast<const From*>(src + off[1]);
    d = kernels::cast<To>(kernels::cast<Acc>(d) + kernels::cast<Acc>(s));
  }
}

// ---- launchers: plan the grid, launch on `stream`, check the launch --------

template <class From, class To>
void launch_convert(const StridedIndexer<2>& ix, char* dst, const char* src, int64_t n, cudaStream_t stream) {
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  convert_kernel<From, To><<<lc.blocks, lc.threads, 0, stream>>>(ix, dst, src, n);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void launch_fill(const StridedIndexer<1>& ix, char* dst, T value, int64_t n, cudaStream_t stream) {
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  fill_kernel<T><<<lc.blocks, lc.threads, 0, stream>>>(ix, dst, value, n);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

template <class From, class To>
void launch_accumulate(const StridedIndexer<2>& ix, char* dst, const char* src, int64_t n, cudaStream_t stream) {
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  accumulate_kernel<From, To><<<lc.blocks, lc.threads, 0, stream>>>(ix, dst, src, n);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

// ---- checks shared by the entry points ---------------------------------------

void check_pair(const char* op, const Tensor& src, const Tensor& dst) {
  if (src.device() != dst.device())
    throw DeviceError(std::string(op) + ": source on " + to_string(src.device()) + ", destination on " +
                      to_string(dst.device()) + "; use Tensor::to(Device) to move between devices");
  if (src.shape() != dst.shape())
    throw ShapeError(std::string(op) + ": source shape " + to_string(src.shape()) + " differs from destination " +
                     to_string(dst.shape()));
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

}  // namespace

// ---- entry points ---------------------------------------------------------

void copy(const Tensor& src, const Tensor& dst) {
  check_pair("copy", src, dst);
  DeviceGuard guard(dst.device().index());
  const cudaStream_t on = current_stream(dst.device().index());
  const auto ix = cuda_plan::make_indexer<2>(dst.shape(), {byte_strides(dst), byte_strides(src)});
  visit_dtype(src.dtype(), [&]<class From>() {
    visit_dtype(dst.dtype(), [&]<class To>() {
      launch_convert<From, To>(ix, bytes_of(dst), bytes_of(src), dst.numel(), on);
    });
  });
}

void fill(const Tensor& dst, double value) {
  DeviceGuard guard(dst.device().index());
  const cudaStream_t on = current_stream(dst.device().index());
  const auto ix = cuda_plan::make_indexer<1>(dst.shape(), {byte_strides(dst)});
  visit_dtype(dst.dtype(), [&]<class T>() {
    launch_fill<T>(ix, bytes_of(dst), kernels::cast<T>(value), dst.numel(), on);
  });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  check_pair("accumulate", src, dst);
  DeviceGuard guard(dst.device().index());
  const cudaStream_t on = current_stream(dst.device().index());
  const auto ix = cuda_plan::make_indexer<2>(dst.shape(), {byte_strides(dst), byte_strides(src)});
  visit_dtype(src.dtype(), [&]<class From>() {
    visit_dtype(dst.dtype(), [&]<class To>() {
      launch_accumulate<From, To>(ix, bytes_of(dst), bytes_of(src), dst.numel(), on);
    });
  });
}

void transfer(const Tensor& src, const Tensor& dst) {
  if (src.shape() != dst.shape() || src.dtype() != dst.dtype() || !src.is_contiguous() || !dst.is_contiguous())
    throw Error("transfer: needs contiguous tensors of one shape and dtype, got " + to_string(src.shape()) + " " +
                std::string(to_string(src.dtype())) + " and " + to_string(dst.shape()) + " " +
                std::string(to_string(dst.dtype())));
  const auto nbytes = static_cast<size_t>(src.numel() * element_size(src.dtype()));
  if (nbytes == 0) return;
  // The copy is queued on the current stream of the CUDA side, after the
  // kernels that wrote the source. Unified addressing lets the runtime tell
  // host from device pointers.
  // Refused while this thread captures a CUDA graph, before any CUDA call:
  // a host source would be frozen into the graph (its staging buffer read at
  // every replay), and a host destination or another device needs a wait.
  if (src.device().is_cpu())
    check_not_capturing("transfer (a copy from the host)",
                        "a replay would copy what the staging buffer holds then, not this data; copy new "
                        "data into the static inputs before the replay instead");
  else if (!dst.device().is_cuda() || dst.device() != src.device())
    note_host_sync(dst.device().is_cpu() ? "transfer (a copy to the host)" : "transfer (a copy between devices)");
  const Device on = src.device().is_cuda() ? src.device() : dst.device();
  DeviceGuard guard(on.index());
  const cudaStream_t stream = current_stream(on.index());
  if (src.device().is_cuda() && dst.device().is_cuda() && src.device() != dst.device()) {
    // The destination's block is ordered on its own device's stream, which
    // may still be using it: let that drain first.
    DeviceGuard dst_guard(dst.device().index());
    MIXGRAD_CUDA_CHECK(cudaStreamSynchronize(current_stream(dst.device().index())));
  }
  if (src.device().is_cpu() && nbytes <= kMaxStagedBytes) {
    // Host to device through a pinned staging buffer: the host bytes are
    // copied into it before this returns (so the caller may free or reuse
    // its memory at once), the DMA runs asynchronously on `stream` (ordered
    // before every later kernel there), and the buffer is reused only after
    // an event recorded behind the copy has completed.
    const StagingBuffer staged = acquire_staging(on.index(), nbytes);
    std::memcpy(staged.ptr, src.raw_data(), nbytes);
    const cudaError_t st = cudaMemcpyAsync(dst.raw_data(), staged.ptr, nbytes, cudaMemcpyHostToDevice, stream);
    release_staging(staged, stream);
    if (st != cudaSuccess) throw_cuda_error(st, "cudaMemcpyAsync", __FILE__, __LINE__);
    return;
  }
  if (src.device().is_cuda() && dst.device().is_cpu() && nbytes <= kMaxStagedBytes) {
    // Device to host through a pinned staging buffer: the DMA runs at the
    // pinned rate (a pageable destination makes the runtime stage it in
    // chunks), the host waits for `stream` (it reads the result next, as
    // before), then copies the bytes out. The buffer goes back to the pool
    // behind the finished copy, so it is free at once.
    const StagingBuffer staged = acquire_staging(on.index(), nbytes);
    cudaError_t st = cudaMemcpyAsync(staged.ptr, src.raw_data(), nbytes, cudaMemcpyDeviceToHost, stream);
    const char* what = "cudaMemcpyAsync";
    if (st == cudaSuccess) {
      st = cudaStreamSynchronize(stream);
      what = "cudaStreamSynchronize";
    }
    if (st == cudaSuccess) std::memcpy(dst.raw_data(), staged.ptr, nbytes);
    release_staging(staged, stream);
    if (st != cudaSuccess) throw_cuda_error(st, what, __FILE__, __LINE__);
    run_pending_checks(on.index());
    return;
  }
  MIXGRAD_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), nbytes, cudaMemcpyDefault, stream));
  // A host destination is read as soon as this returns, and a device
  // destination on another device is used on that device's stream: wait.
  // A large host-to-device copy from mixgrad's own (pageable) host memory
  // needs no wait: the runtime has staged the bytes when cudaMemcpyAsync
  // returns, and later kernels on `stream` are ordered after the copy.
  // External host memory may be pinned, which is read later, by the DMA:
  // wait for it.
  const bool wait = !dst.device().is_cuda() || dst.device() != on || src.impl()->storage->is_external();
  if (wait) {
    if (dst.device().is_cuda()) note_host_sync("transfer (the wait for the destination's device)");
    MIXGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // The host has caught up with the device: the statuses its kernels wrote
  // are ready to check (backend/pending_checks.hpp).
  if (dst.device().is_cpu()) run_pending_checks(on.index());
}

MIXGRAD_CUDA_KERNEL(copy_kernel, copy);
MIXGRAD_CUDA_KERNEL(fill, fill);
MIXGRAD_CUDA_KERNEL(accumulate_kernel, accumulate);

}  // namespace mixgrad::backend::cuda
