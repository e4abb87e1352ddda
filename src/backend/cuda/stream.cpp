// Streams and events (backend/cuda/stream.hpp). The current streams live in
// a thread_local table: reading one costs no CUDA call and no lock.
#include "backend/cuda/stream.hpp"

#include <array>
#include <string>

#include "backend/cuda/check.hpp"
#include "backend/host_sync.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::backend::cuda {

namespace {

thread_local std::array<cudaStream_t, kMaxDevices> t_current{};  // all legacy default

void check_index(int device, const char* op) {
  if (device < 0 || device >= kMaxDevices)
    throw DeviceError(std::string(op) + ": cuda:" + std::to_string(device) + " is out of range (at most " +
                      std::to_string(kMaxDevices) + " devices)");
}

}  // namespace

cudaStream_t current_stream(int device) {
  if (static_cast<unsigned>(device) >= static_cast<unsigned>(kMaxDevices)) check_index(device, "current_stream");
  return t_current[static_cast<size_t>(device)];
}

cudaStream_t stream() {
  int device = 0;
  MIXGRAD_CUDA_CHECK(cudaGetDevice(&device));
  return current_stream(device);
}

void set_current_stream(int device, cudaStream_t stream) {
  check_index(device, "set_current_stream");
  t_current[static_cast<size_t>(device)] = stream;
}

Stream::Stream(int device) : device_(device) {
  check_device(device, "Stream");
  DeviceGuard guard(device);
  MIXGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);  // returns at once; queued work completes
}

void Stream::synchronize() const {
  note_host_sync("Stream::synchronize");
  MIXGRAD_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

bool Stream::query() const {
  const cudaError_t s = cudaStreamQuery(stream_);
  if (s == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  MIXGRAD_CUDA_CHECK(s);
  return true;
}

StreamGuard::StreamGuard(int device, cudaStream_t stream) : device_(device), previous_(nullptr) {
  check_index(device, "StreamGuard");
  previous_ = t_current[static_cast<size_t>(device)];
  t_current[static_cast<size_t>(device)] = stream;
}

StreamGuard::~StreamGuard() { t_current[static_cast<size_t>(device_)] = previous_; }

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

void Event::record(int device, cudaStream_t stream) {
  if (event_ && device != device_)
    throw DeviceError("Event::record: the event belongs to cuda:" + std::to_string(device_) +
                      ", the stream to cuda:" + std::to_string(device));
  DeviceGuard guard(device);
  if (!event_) {
    MIXGRAD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_ = device;
  }
  MIXGRAD_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::wait(cudaStream_t stream) const {
  if (!event_) return;
  MIXGRAD_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void Event::synchronize() const {
  if (!event_) return;
  note_host_sync("Event::synchronize");
  MIXGRAD_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::query() const {
  if (!event_) return true;
  const cudaError_t s = cudaEventQuery(event_);
  if (s == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  MIXGRAD_CUDA_CHECK(s);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  if (!event_ || !end.event_ || !timing_ || !end.timing_)
    throw DeviceError("Event::elapsed_ms: both events must be recorded, with timing enabled");
  float ms = 0;
  MIXGRAD_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace mixgrad::backend::cuda
