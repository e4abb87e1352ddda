// Streams and events of the CUDA backend: a current stream per thread and
// device, a guard that sets it for a scope, owning stream and event handles.
//
//   Stream side(0);                              // a non-blocking stream on cuda:0
//   {
//     StreamGuard on(side);                      // this thread's kernels on cuda:0 go to `side`
//     y = F::relu(x);
//     record_stream(x, side.get());              // x is read here and freed on another stream
//   }
//   Event done;
//   done.record(side);                           // completes when the work above has
//   done.wait(current_stream(0));                // later work on the default stream waits for it
//
// The current stream starts as the legacy default stream (cudaStream_t 0),
// as in PyTorch: it is ordered with every other blocking stream, so plain
// cudaMemcpy, libraries that default to stream 0 and code that never heard
// of streams all see mixgrad's work in order. Work that should overlap goes
// to a Stream (non-blocking) under a StreamGuard.
#pragma once

#include <cuda_runtime_api.h>

namespace mixgrad {
class Tensor;
}

namespace mixgrad::backend::cuda {

/// Devices a thread can keep a current stream for.
inline constexpr int kMaxDevices = 64;

/// The calling thread's current stream on `device` (0: the legacy default
/// stream). `device` must be in [0, kMaxDevices).
cudaStream_t current_stream(int device);

/// Sets the calling thread's current stream on `device`; DeviceError for a
/// device index out of range.
void set_current_stream(int device, cudaStream_t stream);

/// An owning CUDA stream (cudaStreamNonBlocking: not ordered with the legacy
/// default stream). Destroying it does not wait; queued work still runs.
class Stream {
 public:
  /// Creates the stream on `device`; DeviceError when that is not possible.
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  /// Waits until the work queued so far has finished.
  void synchronize() const;
  /// True when all queued work has finished (does not wait).
  bool query() const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

/// Makes `stream` the calling thread's current stream on `device` for the
/// scope and restores the previous one.
class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  explicit StreamGuard(const Stream& stream) : StreamGuard(stream.device(), stream.get()) {}
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

/// An owning CUDA event, created on its first record() (so an Event that is
/// never recorded needs no device). Timing is off unless asked for.
class Event {
 public:
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Completes when the work queued on `stream` of `device` so far has.
  void record(int device, cudaStream_t stream);
  void record(const Stream& stream) { record(stream.device(), stream.get()); }
  /// Makes later work on `stream` wait for this event (no host wait). A
  /// never-recorded event is already complete: nothing to wait for.
  void wait(cudaStream_t stream) const;
  /// Waits on the host until the event completed.
  void synchronize() const;
  /// True when the event completed or was never recorded.
  bool query() const;
  /// Milliseconds between this event and `end`, both recorded with timing
  /// on and completed; DeviceError otherwise.
  float elapsed_ms(const Event& end) const;
  bool recorded() const { return event_ != nullptr; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
  bool timing_ = false;
};

/// Marks the memory of `t` (a CUDA tensor) as used on `stream`, so that when
/// it is freed the caching allocator reuses it only after the work queued
/// on `stream` up to then has finished. Needed when a tensor allocated on
/// one stream is read or written on another.
void record_stream(const Tensor& t, cudaStream_t stream);

}  // namespace mixgrad::backend::cuda
