// tests/perf/bench_sides.hpp — what the training benchmark asks of each
// framework ("side"): a training step for a model at a precision, one tiny
// autodiff op, and the thread count.
//
//   auto step = perf::mixgrad_side::make_trainer(perf::Model::cnn, perf::Precision::bf16);
//   step->step();                     // forward, loss, backward, SGD step, zero grads
//
// The interface uses only types that the two C++ standard-library ABIs
// (_GLIBCXX_USE_CXX11_ABI 0 and 1) lay out alike — no std::string, no
// std::list — because the LibTorch side is compiled with whatever ABI the
// LibTorch build uses, and the rest with the compiler's default.
#pragma once

#include <cstdint>
#include <memory>

namespace perf {

enum class Model { mlp, cnn, resnet };
enum class Precision { fp32, bf16 };
enum class TinyOp { add, mul, relu, sum, matmul };

inline constexpr Model kModels[] = {Model::mlp, Model::cnn, Model::resnet};
inline constexpr Precision kPrecisions[] = {Precision::fp32, Precision::bf16};
inline constexpr TinyOp kTinyOps[] = {TinyOp::add, TinyOp::mul, TinyOp::relu, TinyOp::sum, TinyOp::matmul};

inline const char* name(Model m) {
  switch (m) {
    case Model::mlp: return "MLP";
    case Model::cnn: return "CNN";
    case Model::resnet: return "ResNet";
  }
  return "?";
}
inline const char* name(Precision p) { return p == Precision::fp32 ? "fp32" : "bf16 autocast"; }
inline const char* name(TinyOp op) {
  switch (op) {
    case TinyOp::add: return "add";
    case TinyOp::mul: return "mul";
    case TinyOp::relu: return "relu";
    case TinyOp::sum: return "sum";
    case TinyOp::matmul: return "matmul";
  }
  return "?";
}

/// The batch size each model is trained at: MLP 256, CNN 128, ResNet 64.
inline int64_t batch_size(Model m) {
  switch (m) {
    case Model::mlp: return 256;
    case Model::cnn: return 128;
    case Model::resnet: return 64;
  }
  return 0;
}

/// Multiply-accumulates of the MLP's three linear layers for one sample.
inline constexpr int64_t kMlpMacsPerSample = 784 * 1024 + 1024 * 1024 + 1024 * 10;

/// One repeatable unit of work: a training step, or one tiny op's forward
/// and backward. Owns its model, optimizer and data.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void run() = 0;
  /// The last loss (training) or a checksum, so a broken step shows.
  virtual double value() const = 0;
};

// Each side provides the same four functions in its own namespace.
namespace mixgrad_side {
/// A training step of `model` at `precision`: forward and cross-entropy on
/// random data of the model's batch size (forward and loss under bf16
/// autocast for Precision::bf16), backward, SGD (lr 0.01, momentum 0.9)
/// step, zero grads.
std::unique_ptr<Runner> make_trainer(Model model, Precision precision);
/// Forward and backward of one op on 2x2 float32 tensors that need grads
/// (backward from the op's output with an all-ones upstream gradient), then
/// the inputs' grads cleared.
std::unique_ptr<Runner> make_tiny_op(TinyOp op);
void set_threads(int n);
/// A static string.
const char* version();
}  // namespace mixgrad_side

namespace libtorch_side {
std::unique_ptr<Runner> make_trainer(Model model, Precision precision);
std::unique_ptr<Runner> make_tiny_op(TinyOp op);
void set_threads(int n);
const char* version();
}  // namespace libtorch_side

}  // namespace perf
