// tests/perf/bench_sides.hpp — what the training benchmark asks of each
// framework ("side"): a training step for a model at a precision, one tiny
// autodiff op, and the thread count.
//
//   auto step = perf::mixgrad_side::make_trainer(perf::Model::cnn, perf::Precision::bf16);
//   step->run();                      // forward, loss, backward, SGD step, zero grads
//   auto gpu = perf::mixgrad_side::make_trainer(perf::Model::mlp, perf::Precision::fp16, 0);  // on cuda:0
//   gpu->run(); perf::mixgrad_side::synchronize(0);  // a step queues work: wait for it
//
// A device is an int: kCpu (-1), or the index of a CUDA device.
//
// The interface uses only types that the two C++ standard-library ABIs
// (_GLIBCXX_USE_CXX11_ABI 0 and 1) lay out alike — no std::string, no
// std::list — because the LibTorch side is compiled with whatever ABI the
// LibTorch build uses, and the rest with the compiler's default.
#pragma once

#include <cstdint>
#include <memory>

namespace perf {

/// mlp_large (4096 wide, batch 1024) is the GEMM-bound model of the GPU
/// benchmark only; kModels are the CPU benchmark's.
enum class Model { mlp, cnn, resnet, mlp_large };
/// fp16: float16 autocast with dynamic loss scaling (GradScaler), on CUDA.
enum class Precision { fp32, bf16, fp16 };

/// The device argument of the functions below: the CPU, or a CUDA index >= 0.
inline constexpr int kCpu = -1;
enum class TinyOp { add, mul, relu, sum, matmul };

inline constexpr Model kModels[] = {Model::mlp, Model::cnn, Model::resnet};
inline constexpr Precision kPrecisions[] = {Precision::fp32, Precision::bf16};
inline constexpr TinyOp kTinyOps[] = {TinyOp::add, TinyOp::mul, TinyOp::relu, TinyOp::sum, TinyOp::matmul};

inline const char* name(Model m) {
  switch (m) {
    case Model::mlp: return "MLP";
    case Model::cnn: return "CNN";
    case Model::resnet: return "ResNet";
    case Model::mlp_large: return "MLP-4096";
  }
  return "?";
}
inline const char* name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16 autocast";
    case Precision::fp16: return "fp16 autocast";
  }
  return "?";
}
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

/// The batch size each model is trained at: MLP 256, CNN 128, ResNet 64,
/// MLP-4096 1024.
inline int64_t batch_size(Model m) {
  switch (m) {
    case Model::mlp: return 256;
    case Model::cnn: return 128;
    case Model::resnet: return 64;
    case Model::mlp_large: return 1024;
  }
  return 0;
}

/// The large MLP: [N, 4096] -> 4096 -> 4096 -> 10, ReLU between the layers.
inline constexpr int64_t kLargeWidth = 4096;

/// Multiply-accumulates of the MLP's three linear layers for one sample.
inline constexpr int64_t kMlpMacsPerSample = 784 * 1024 + 1024 * 1024 + 1024 * 10;
/// Of those, the first layer's: no input gradient is computed for them (the
/// input needs none, and neither framework computes one).
inline constexpr int64_t kMlpFirstLayerMacsPerSample = 784 * 1024;

/// One repeatable unit of work: a training step, or one tiny op's forward
/// and backward. Owns its model, optimizer and data.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void run() = 0;
  /// The last loss (training) or a checksum, so a broken step shows.
  virtual double value() const = 0;
};

// Each side provides the same functions in its own namespace.
namespace mixgrad_side {
/// A training step of `model` at `precision` on `device` (model, data and
/// optimizer live there): forward and cross-entropy on random data of the
/// model's batch size (forward and loss under bf16 autocast for
/// Precision::bf16; under float16 autocast for Precision::fp16, whose
/// backward goes through a dynamic loss scaler and whose step is skipped on
/// overflow), backward, SGD (lr 0.01, momentum 0.9) step, zero grads. On
/// CUDA a step only queues work: value() synchronises, run() need not.
std::unique_ptr<Runner> make_trainer(Model model, Precision precision, int device = kCpu);
/// One m x k by k x n matrix product on `device`, operands in float32
/// (fp32) or the precision's 16-bit dtype: the bare GEMM rate.
std::unique_ptr<Runner> make_matmul(int64_t m, int64_t k, int64_t n, Precision precision, int device);
/// CUDA devices this side can use (0 where it has no CUDA); `why` gets a
/// static string saying why there are none.
int cuda_device_count(const char** why);
/// Waits for the work queued on `device` (nothing on the CPU).
void synchronize(int device);
/// Peak bytes held by tensors on CUDA `device` since reset_peak_memory, or
/// -1 where this side cannot tell.
int64_t peak_memory(int device);
void reset_peak_memory(int device);
/// Forward and backward of one op on 2x2 float32 tensors that need grads
/// (backward from the op's output with an all-ones upstream gradient), then
/// the inputs' grads cleared.
std::unique_ptr<Runner> make_tiny_op(TinyOp op);
void set_threads(int n);
/// A static string.
const char* version();
}  // namespace mixgrad_side

namespace libtorch_side {
std::unique_ptr<Runner> make_trainer(Model model, Precision precision, int device = kCpu);
std::unique_ptr<Runner> make_matmul(int64_t m, int64_t k, int64_t n, Precision precision, int device);
int cuda_device_count(const char** why);
void synchronize(int device);
int64_t peak_memory(int device);
void reset_peak_memory(int device);
std::unique_ptr<Runner> make_tiny_op(TinyOp op);
void set_threads(int n);
const char* version();
}  // namespace libtorch_side

}  // namespace perf
