// mg::cuda::CapturedStep (mixgrad/train/captured_step.hpp): the public face
// of backend::StepCapture over the CUDA graph device.
#include "mixgrad/train/captured_step.hpp"

#include <string>
#include <utility>

#include "backend/step_capture.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::cuda {

namespace {

int device_of(const std::vector<CapturedStep::Input>& inputs, int wanted) {
  if (wanted >= 0) return wanted;
  if (inputs.empty()) throw DeviceError("CapturedStep: no static input and no Options::device: which CUDA device?");
  const Tensor& t = inputs.front().tensor;
  if (!t.defined() || !t.device().is_cuda())
    throw DeviceError(std::string("CapturedStep: input '").append(inputs.front().name).append("' is ")
                          .append(t.defined() ? std::string("on ").append(to_string(t.device())) : std::string("undefined"))
                          .append(": a captured step runs on a CUDA device"));
  return t.device().index();
}

}  // namespace

CapturedStep::CapturedStep(std::function<void()> step, std::vector<Input> static_inputs, Options options) {
  const int device = device_of(static_inputs, options.device);
  std::vector<backend::StaticInput> inputs;
  inputs.reserve(static_inputs.size());
  for (Input& in : static_inputs) {
    if (in.tensor.defined() && in.tensor.device() != Device::cuda(device))
      throw DeviceError(std::string("CapturedStep: input '").append(in.name).append("' is on ")
                            .append(to_string(in.tensor.device())).append(", the step runs on cuda:")
                            .append(std::to_string(device)));
    inputs.push_back({std::move(in.name), std::move(in.tensor)});
  }
  capture_ = std::make_unique<backend::StepCapture>(backend::make_cuda_graph_device(device), std::move(step),
                                                    std::move(inputs),
                                                    backend::StepCapture::Options{.warmup_steps = options.warmup_steps});
  capture_->capture();
}

CapturedStep::~CapturedStep() = default;

void CapturedStep::replay(const std::vector<Tensor>& inputs) { capture_->replay(inputs); }

void CapturedStep::replay() {
  std::vector<Tensor> same;
  same.reserve(capture_->inputs().size());
  for (const backend::StaticInput& in : capture_->inputs()) same.push_back(in.tensor);
  capture_->replay(same);
}

int64_t CapturedStep::replays() const { return capture_->replays(); }

const Tensor& CapturedStep::input(size_t i) const {
  if (i >= capture_->inputs().size())
    throw ValueError(std::string("CapturedStep::input: index ").append(std::to_string(i)).append(", the step has ")
                         .append(std::to_string(capture_->inputs().size())).append(" static inputs"));
  return capture_->inputs()[i].tensor;
}

}  // namespace mixgrad::cuda
