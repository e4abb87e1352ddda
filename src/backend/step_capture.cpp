// The rules of a captured training step (backend/step_capture.hpp).
#include "backend/step_capture.hpp"

#include <string>
#include <utility>

#include "backend/copy.hpp"
#include "backend/host_sync.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::backend {

namespace {

constexpr const char* kOwner = "CapturedStep";

std::string named(const char* op, const StaticInput& in) {
  return std::string(op).append(": input '").append(in.name).append("' ");
}

}  // namespace

StepCapture::StepCapture(std::unique_ptr<GraphDevice> device, std::function<void()> step,
                         std::vector<StaticInput> inputs, Options options)
    : device_(std::move(device)), step_(std::move(step)), inputs_(std::move(inputs)), options_(options) {
  constexpr const char* op = "CapturedStep";
  if (!device_) throw ValueError(std::string(op).append(": no graph device"));
  if (!step_) throw ValueError(std::string(op).append(": the step is empty"));
  if (options_.warmup_steps < 1)
    throw ValueError(std::string(op).append(": warmup_steps must be at least 1, got ")
                         .append(std::to_string(options_.warmup_steps)));
  for (const StaticInput& in : inputs_) {
    if (!in.tensor.defined()) throw ValueError(named(op, in).append("is undefined"));
    if (!in.tensor.is_contiguous()) throw ValueError(named(op, in).append("must be contiguous"));
    if (in.tensor.device() != inputs_.front().tensor.device())
      throw DeviceError(named(op, in).append("is on ").append(to_string(in.tensor.device()))
                            .append(", input '").append(inputs_.front().name).append("' on ")
                            .append(to_string(inputs_.front().tensor.device())));
  }
}

StepCapture::~StepCapture() {
  if (device_) device_->release();
}

void StepCapture::capture() {
  if (state_ == State::captured) throw StateError("CapturedStep::capture: the step is already captured");
  for (int i = 0; i < options_.warmup_steps; ++i) {
    device_->warm_up(step_);
    ++warmups_;
  }
  (void)take_captured_checks();  // none from an earlier capture on this thread
  device_->begin_capture();
  std::vector<CapturedCheck> checks;
  try {
    CaptureRegion region(kOwner);
    step_();
    checks = take_captured_checks();
    if (!region.refused().empty())  // the step caught the refusal and went on
      throw StateError(std::string("CapturedStep: the step called ").append(region.refused())
                           .append(" during the capture and caught the error; the graph would lack it"));
  } catch (...) {
    (void)take_captured_checks();  // a failed capture's checks read nothing
    device_->abort_capture();
    throw;
  }
  device_->end_capture();
  checks_ = std::move(checks);
  state_ = State::captured;
}

void StepCapture::check_inputs(const std::vector<Tensor>& inputs) const {
  constexpr const char* op = "CapturedStep::replay";
  if (inputs.size() != inputs_.size())
    throw ValueError(std::string(op).append(": ").append(std::to_string(inputs.size()))
                         .append(" inputs given, the step was captured with ")
                         .append(std::to_string(inputs_.size())));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const Tensor& s = inputs_[i].tensor;
    if (!t.defined()) throw ValueError(named(op, inputs_[i]).append("is undefined"));
    if (t.shape() != s.shape())
      throw ShapeError(named(op, inputs_[i]).append("has shape ").append(to_string(t.shape()))
                           .append(", the graph was captured for ").append(to_string(s.shape())));
    if (t.dtype() != s.dtype())
      throw DTypeError(named(op, inputs_[i]).append("is ").append(to_string(t.dtype()))
                           .append(", the graph was captured for ").append(to_string(s.dtype())));
    if (t.device() != s.device())
      throw DeviceError(named(op, inputs_[i]).append("is on ").append(to_string(t.device()))
                            .append(", the graph was captured on ").append(to_string(s.device())));
  }
}

void StepCapture::replay(const std::vector<Tensor>& inputs) {
  if (state_ != State::captured) throw StateError("CapturedStep::replay: the step is not captured");
  check_inputs(inputs);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].raw_data() != inputs_[i].tensor.raw_data()) copy(inputs[i], inputs_[i].tensor);
  device_->launch();
  ++replays_;
  rearm_captured_checks(checks_);
}

}  // namespace mixgrad::backend

#if !MIXGRAD_WITH_CUDA
namespace mixgrad::backend {

std::unique_ptr<GraphDevice> make_cuda_graph_device(int device) {
  throw DeviceError(std::string("CapturedStep: cuda:").append(std::to_string(device))
                        .append(" is not available: mixgrad was built without its CUDA backend"));
}

}  // namespace mixgrad::backend
#endif
