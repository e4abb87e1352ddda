// mixgrad/train/captured_step.hpp — a whole training step captured as one
// CUDA graph and replayed: forward under autocast, scaler.backward, the
// fused optimizer step, the scale update and the schedule's step, one graph
// launch per step instead of hundreds of kernel launches.
//
//   mg::Tensor x = mg::empty({256, 784}, mg::DType::float32, gpu);   // static inputs
//   mg::Tensor y = mg::empty({256}, mg::DType::int64, gpu);
//   mg::Tensor loss;                                                  // written by every replay
//   mg::cuda::CapturedStep step([&] {
//     opt.zero_grad();
//     { auto ac = mg::amp::autocast(true, mg::DType::float16); loss = mg::F::cross_entropy(net(x), y); }
//     scaler.backward(gm, loss);
//     opt.step(scaler);
//     scaler.update();
//     sched.step(scaler);
//   }, {{"x", x}, {"y", y}});
//   for (auto [xb, yb] : batches) step.replay({xb.to(gpu), yb.to(gpu)});   // copied into x, y; one launch
//
// The constructor runs the step eagerly `warmup_steps` times on a side
// stream (these are real training steps, on whatever the static inputs
// hold), then captures it once (the capture runs nothing). Each replay is
// one step. Between replays the step's tensors (loss above, the
// parameters, the scaler's scale) are ordinary tensors holding the last
// replay's values.
//
// Rules, checked (docs/cuda.md, "Captured steps"):
// - Static shapes: replay's inputs must have the static inputs' shapes,
//   dtypes and device: ShapeError / DTypeError / DeviceError naming the input.
// - No host synchronisation in the step (item(), to(cpu), a host-side
//   schedule or clip): StateError naming the op, raised before it reaches
//   CUDA; the object is then not built. No value read from the host per step
//   either: dropout and copies from host memory are refused the same way.
// - Memory the capture allocates comes from a private pool of the caching
//   allocator, and nothing freed during the capture is reused outside it
//   until the CapturedStep is destroyed.
// - The learning rate must come from the device (a scheduler stepped with
//   step(scaler) or step(), which from its first step keeps the lr on the
//   device; the warm-up's steps do that), as must Adam's step count and the
//   loss scale, which always do.
//
// Without a CUDA device (a CPU build, no GPU, inputs on the CPU) the
// constructor throws DeviceError.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::backend {
class StepCapture;
}

namespace mixgrad::cuda {

class CapturedStep {
 public:
  /// A static input: its data is replaced by replay's.
  struct Input {
    std::string name;
    Tensor tensor;
  };
  struct Options {
    int warmup_steps = 3;  // eager steps before the capture, at least 1
    int device = -1;       // the CUDA device; -1: the static inputs' device
  };

  /// Warm-up and capture as above; throws what the step throws, or the
  /// errors above, with nothing captured.
  CapturedStep(std::function<void()> step, std::vector<Input> static_inputs, Options options);
  CapturedStep(std::function<void()> step, std::vector<Input> static_inputs)
      : CapturedStep(std::move(step), std::move(static_inputs), Options{}) {}
  /// Waits for the last replay, then frees the graph and its memory pool.
  ~CapturedStep();
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  /// Copies `inputs` (one per static input, in order) into the static
  /// inputs and runs the step once, on the current stream. An input that is
  /// the static input itself is not copied.
  void replay(const std::vector<Tensor>& inputs);
  /// Runs the step on what the static inputs hold now.
  void replay();

  int64_t replays() const;
  /// The static input `i`, to fill in place instead of copying.
  const Tensor& input(size_t i) const;

 private:
  std::unique_ptr<backend::StepCapture> capture_;
};

}  // namespace mixgrad::cuda
