// The rules of a captured training step, as host logic: warm-up, capture,
// replay, and what each refuses. The device side (streams, the graph, the
// capture pool) is behind GraphDevice, which the CUDA backend implements
// (backend/cuda/graph.cpp) and tests mock (tests/cuda/test_capture_rules.cpp),
// so every rule below is tested without a GPU.
//
//   StepCapture cap(make_cuda_graph_device(0), step, {{"x", x}, {"y", y}}, {.warmup_steps = 3});
//   cap.replay({xb, yb});    // copies into x and y, then launches the graph
//
// - Warm-up: the step runs eagerly warmup_steps times (GraphDevice::warm_up:
//   on a side stream, so lazy initialisation, workspaces and the optimizer's
//   state exist before the capture).
// - Capture: inside a CaptureRegion (backend/host_sync.hpp), so a host
//   synchronisation or a host value a replay would not read again throws
//   StateError naming the op before it reaches CUDA. A step that catches
//   that error and goes on is caught too: the region remembers what it
//   refused. Any failure aborts the capture (the device drops what it
//   captured) and leaves the object as it was: not captured, no replay
//   possible, and a later capture() may try again.
// - Replay: every input is checked against its static input (shape, dtype,
//   device: ShapeError, DTypeError, DeviceError naming the input and
//   "CapturedStep::replay") before anything is copied; then the inputs are
//   copied into the static inputs and the graph launched. The status checks
//   the captured ops deferred (a class loss's label check,
//   backend/pending_checks.hpp) are re-armed after every launch, so a bad
//   label in any replayed batch is reported as an eager step reports it; a
//   failed capture drops its checks.
// - Lifetime: destroying the object releases the graph and retires the
//   capture pool (GraphDevice::release).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/pending_checks.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::backend {

/// What a capture needs from a device. One object per captured step.
class GraphDevice {
 public:
  virtual ~GraphDevice() = default;
  /// Runs `step` eagerly, ordered after the work queued on the current
  /// stream and before the work queued there later.
  virtual void warm_up(const std::function<void()>& step) = 0;
  /// Starts capturing the calling thread's work on a private stream, with
  /// allocations from a private pool.
  virtual void begin_capture() = 0;
  /// Ends the capture and makes the graph replayable.
  virtual void end_capture() = 0;
  /// Ends a failed capture and drops what it captured.
  virtual void abort_capture() noexcept = 0;
  /// Replays the graph on the current stream.
  virtual void launch() = 0;
  /// Destroys the graph and retires the pool; called once, last.
  virtual void release() noexcept = 0;
};

/// The CUDA implementation for `device` (backend/cuda/graph.cpp);
/// DeviceError in a build without CUDA or without that device.
std::unique_ptr<GraphDevice> make_cuda_graph_device(int device);

/// A named static input of a captured step.
struct StaticInput {
  std::string name;
  Tensor tensor;
};

class StepCapture {
 public:
  struct Options {
    int warmup_steps = 3;  // eager runs before the capture (>= 1)
  };
  enum class State { warm, captured };

  /// Checks the inputs (defined, contiguous, one device; ValueError /
  /// DeviceError naming the input, nothing run) and keeps them; runs nothing.
  StepCapture(std::unique_ptr<GraphDevice> device, std::function<void()> step, std::vector<StaticInput> inputs,
              Options options);
  ~StepCapture();
  StepCapture(const StepCapture&) = delete;
  StepCapture& operator=(const StepCapture&) = delete;

  /// Warm-up, then capture; StateError when already captured. On failure
  /// the error propagates and the state is unchanged.
  void capture();
  /// Checks, copies and launches as above; StateError before capture().
  void replay(const std::vector<Tensor>& inputs);

  State state() const { return state_; }
  int64_t replays() const { return replays_; }
  int64_t warmups() const { return warmups_; }
  const std::vector<StaticInput>& inputs() const { return inputs_; }

 private:
  void check_inputs(const std::vector<Tensor>& inputs) const;

  std::unique_ptr<GraphDevice> device_;
  std::function<void()> step_;
  std::vector<StaticInput> inputs_;
  Options options_;
  State state_ = State::warm;
  int64_t replays_ = 0;
  int64_t warmups_ = 0;
  std::vector<CapturedCheck> checks_;  // deferred by the captured ops, re-armed per replay
};

}  // namespace mixgrad::backend
