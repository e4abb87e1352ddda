// The CUDA side of a captured training step (backend/step_capture.hpp): the
// warm-up on a side stream, the capture on a private stream with the
// allocator's capture pool, the instantiated graph and its launches.
//
// The capture uses cudaStreamCaptureModeThreadLocal: this thread may make no
// call CUDA deems unsafe in a capture (the backend refuses its own host
// synchronisations first, with a StateError naming the op, backend/host_sync.hpp);
// other threads (a data loader's) go on as they were.
#include <cuda_runtime_api.h>

#include <memory>
#include <optional>

#include "backend/capture_pool.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/memory.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/host_sync.hpp"
#include "backend/step_capture.hpp"
#include "mixgrad/cuda.hpp"

namespace mixgrad::backend {

namespace cuda {

namespace {

class CudaGraphDevice final : public GraphDevice {
 public:
  explicit CudaGraphDevice(int device)
      : device_(device), side_(device), capture_(device), pool_(capture_pools().create_pool()) {}
  ~CudaGraphDevice() override { release(); }

  void warm_up(const std::function<void()>& step) override {
    // The side stream starts after the work queued so far and the caller's
    // later work waits for it: the warm-up is ordered as if it ran in place.
    Event ready;
    ready.record(device_, current_stream(device_));
    ready.wait(side_.get());
    {
      StreamGuard on(side_);
      step();
    }
    Event done;
    done.record(side_);
    done.wait(current_stream(device_));
  }

  void begin_capture() override {
    // One host synchronisation before the capture (as PyTorch's): the warm-up
    // has finished, and the deferred status checks run now, so that a full
    // list of them (backend/pending_checks.hpp) cannot make the capture sync.
    mixgrad::cuda::synchronize(device_);
    // The capture stream must see what the warm-up and the caller queued.
    Event ready;
    ready.record(device_, current_stream(device_));
    ready.wait(capture_.get());
    capture_pools().begin(pool_);
    guard_.emplace(device_, capture_.get());
    DeviceGuard dg(device_);
    const cudaError_t st = cudaStreamBeginCapture(capture_.get(), cudaStreamCaptureModeThreadLocal);
    if (st != cudaSuccess) {
      guard_.reset();
      capture_pools().end();
      throw_cuda_error(st, "cudaStreamBeginCapture", __FILE__, __LINE__);
    }
  }

  void end_capture() override {
    DeviceGuard dg(device_);
    cudaGraph_t graph = nullptr;
    const cudaError_t st = cudaStreamEndCapture(capture_.get(), &graph);
    guard_.reset();
    capture_pools().end();
    if (st != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      throw_cuda_error(st, "cudaStreamEndCapture (the step did something a CUDA graph cannot hold)", __FILE__,
                       __LINE__);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    if (inst != cudaSuccess) {
      cudaGraphDestroy(graph);
      throw_cuda_error(inst, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    graph_ = graph;
    exec_ = exec;
  }

  void abort_capture() noexcept override {
    DeviceGuard dg(device_);
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(capture_.get(), &graph);  // fails when the capture was invalidated: nothing to keep
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    guard_.reset();
    capture_pools().end();
  }

  void launch() override {
    DeviceGuard dg(device_);
    last_stream_ = current_stream(device_);
    MIXGRAD_CUDA_CHECK(cudaGraphLaunch(exec_, last_stream_));
    launched_ = true;
  }

  void release() noexcept override {
    if (released_) return;
    released_ = true;
    DeviceGuard dg(device_);
    // The pool's memory and the blocks the capture held go back only once
    // the last replay has finished reading them.
    if (launched_ && !capturing()) {
      note_host_sync("CapturedStep's destruction");
      cudaStreamSynchronize(last_stream_);
    }
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    cudaGetLastError();
    try {
      capture_pools().destroy_pool(pool_);
    } catch (...) {  // still routed (destroyed inside its own capture): the pool stays
    }
  }

 private:
  int device_;
  Stream side_;
  Stream capture_;
  CapturePools::PoolId pool_;
  std::optional<StreamGuard> guard_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  cudaStream_t last_stream_ = nullptr;
  bool launched_ = false;
  bool released_ = false;
};

}  // namespace

}  // namespace cuda

std::unique_ptr<GraphDevice> make_cuda_graph_device(int device) {
  cuda::check_device(device, "CapturedStep");
  return std::make_unique<cuda::CudaGraphDevice>(device);
}

}  // namespace mixgrad::backend
