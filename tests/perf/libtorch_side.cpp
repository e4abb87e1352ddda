// The LibTorch side of the training benchmark: the models of
// examples/models.hpp rebuilt with torch::nn, trained with torch::optim::SGD,
// bf16 through LibTorch's CPU autocast, fp16 through its CUDA (or CPU)
// autocast and the loss scaling of torch.amp.GradScaler (its ATen kernels;
// the C++ API has no GradScaler class). Compiled only where a LibTorch is
// found, with that LibTorch's C++ ABI flag; see bench_sides.hpp for why the
// interface is ABI-neutral.
//
// CUDA: the benchmark links libtorch_cpu and libc10 only (so it starts on
// machines without NVIDIA's libraries); a LibTorch with CUDA registers its
// CUDA backend when libtorch_cuda is loaded, which cuda_device_count() does
// with dlopen.
#include <dlfcn.h>

#include <string>

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#define MIXGRAD_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)
#if MIXGRAD_TORCH_VERSION >= 209 && __has_include(<ATen/DeviceAccelerator.h>)
#include <ATen/DeviceAccelerator.h>
#define MIXGRAD_TORCH_MEMORY_STATS 1  // at::accelerator::getDeviceStats / resetPeakStats
#else
#define MIXGRAD_TORCH_MEMORY_STATS 0
#endif

#include "bench_sides.hpp"
#include "libtorch_autocast.hpp"

namespace perf::libtorch_side {
namespace {

namespace tnn = torch::nn;

tnn::Conv2dOptions conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, bool bias) {
  return tnn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(bias);
}

// Mirrors models::BasicBlock.
struct BasicBlockImpl : tnn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", tnn::Conv2d(conv(in, out, 3, stride, 1, false)))),
        bn1(register_module("bn1", tnn::BatchNorm2d(out))),
        conv2(register_module("conv2", tnn::Conv2d(conv(out, out, 3, 1, 1, false)))),
        bn2(register_module("bn2", tnn::BatchNorm2d(out))) {
    if (stride != 1 || in != out)
      shortcut = register_module("shortcut", tnn::Sequential(tnn::Conv2d(conv(in, out, 1, stride, 0, false)),
                                                             tnn::BatchNorm2d(out)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(bn1->forward(conv1->forward(x)));
    y = bn2->forward(conv2->forward(y));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  tnn::Conv2d conv1;
  tnn::BatchNorm2d bn1;
  tnn::Conv2d conv2;
  tnn::BatchNorm2d bn2;
  tnn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

tnn::Sequential make_model(Model m) {
  switch (m) {
    case Model::mlp:
      return tnn::Sequential(tnn::Flatten(), tnn::Linear(784, 1024), tnn::ReLU(), tnn::Linear(1024, 1024), tnn::ReLU(),
                             tnn::Linear(1024, 10));
    case Model::cnn:
      return tnn::Sequential(tnn::Conv2d(conv(1, 32, 3, 1, 1, true)), tnn::BatchNorm2d(32), tnn::ReLU(),
                             tnn::MaxPool2d(2), tnn::Conv2d(conv(32, 64, 3, 1, 1, true)), tnn::BatchNorm2d(64),
                             tnn::ReLU(), tnn::MaxPool2d(2), tnn::Flatten(), tnn::Linear(64 * 7 * 7, 128), tnn::ReLU(),
                             tnn::Linear(128, 10));
    case Model::mlp_large:
      return tnn::Sequential(tnn::Linear(kLargeWidth, kLargeWidth), tnn::ReLU(), tnn::Linear(kLargeWidth, kLargeWidth),
                             tnn::ReLU(), tnn::Linear(kLargeWidth, 10));
    case Model::resnet:
      return tnn::Sequential(tnn::Conv2d(conv(1, 16, 3, 1, 1, false)), tnn::BatchNorm2d(16), tnn::ReLU(),
                             BasicBlock(16, 16, 1), BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 32, 1),
                             BasicBlock(32, 64, 2), BasicBlock(64, 64, 1),
                             tnn::AdaptiveAvgPool2d(tnn::AdaptiveAvgPool2dOptions(1)), tnn::Flatten(),
                             tnn::Linear(64, 10));
  }
  return nullptr;
}


torch::Device to_device(int device) {
  return device == kCpu ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device));
}

// torch.amp.GradScaler's step with its defaults (2^16, x2 every 2000 clean
// steps, x0.5 on overflow), through the same ATen kernels: scale the loss,
// backward, unscale all grads and check them in one pass, step unless an
// overflow was found (a host read of the flag, as GradScaler.step does), update.
class LossScaler {
 public:
  explicit LossScaler(torch::Device d)
      : scale_(torch::full({1}, 65536.0, torch::TensorOptions().dtype(torch::kFloat).device(d))),
        tracker_(torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt).device(d))),
        found_inf_(torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(d))) {}
  void step(const torch::Tensor& loss, torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& params) {
    (loss * scale_).backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : params)
      if (p.grad().defined()) grads.push_back(p.grad());
    found_inf_.zero_();
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, scale_.to(torch::kDouble).reciprocal().to(torch::kFloat));
    if (found_inf_.item<float>() == 0.0f) opt.step();
    at::_amp_update_scale_(scale_, tracker_, found_inf_, 2.0, 0.5, 2000);
  }

 private:
  torch::Tensor scale_, tracker_, found_inf_;
};

class Trainer final : public Runner {
 public:
  Trainer(Model m, Precision p, int device)
      : net_(make_model_on(m, device)),
        opt_(net_->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)),
        precision_(p),
        cuda_(device != kCpu) {
    const int64_t n = batch_size(m);
    const torch::Device d = to_device(device);
    x_ = (m == Model::mlp         ? torch::randn({n, 784})
          : m == Model::mlp_large ? torch::randn({n, kLargeWidth})
                                  : torch::randn({n, 1, 28, 28}))
             .to(d);
    y_ = torch::randint(0, 10, {n}, torch::kLong).to(d);
    if (p == Precision::fp16) scaler_ = std::make_unique<LossScaler>(d);
  }
  // The loss stays a tensor: reading it on the host each step would
  // synchronise a CUDA step (value() reads it when asked).
  void run() override {
    if (precision_ == Precision::fp32) {
      loss_ = torch::nn::functional::cross_entropy(net_->forward(x_), y_);
    } else {
      Autocast scope(cuda_);
      loss_ = torch::nn::functional::cross_entropy(net_->forward(x_), y_);
    }
    if (scaler_) {
      scaler_->step(loss_, opt_, net_->parameters());
    } else {
      loss_.backward();
      opt_.step();
    }
    opt_.zero_grad();
  }
  double value() const override { return loss_.defined() ? loss_.item<double>() : 0.0; }

 private:
  static tnn::Sequential make_model_on(Model m, int device) {
    tnn::Sequential net = make_model(m);
    if (device != kCpu) net->to(to_device(device));
    return net;
  }

  tnn::Sequential net_;
  torch::optim::SGD opt_;
  Precision precision_;
  bool cuda_;
  std::unique_ptr<LossScaler> scaler_;
  torch::Tensor x_, y_, loss_;
};

class Matmul final : public Runner {
 public:
  Matmul(int64_t m, int64_t k, int64_t n, Precision p, int device) {
    const auto opts = torch::TensorOptions()
                          .dtype(p == Precision::fp32   ? torch::kFloat
                                 : p == Precision::fp16 ? torch::kHalf
                                                        : torch::kBFloat16)
                          .device(to_device(device));
    a_ = torch::randn({m, k}).to(opts);
    b_ = torch::randn({k, n}).to(opts);
  }
  void run() override { c_ = torch::mm(a_, b_); }
  double value() const override { return c_.defined() ? c_.to(torch::kFloat).sum().item<double>() : 0.0; }

 private:
  torch::Tensor a_, b_, c_;
};

class Tiny final : public Runner {
 public:
  explicit Tiny(TinyOp op)
      : op_(op),
        a_(torch::randn({2, 2}).requires_grad_()),
        b_(torch::randn({2, 2}).requires_grad_()),
        dy_(op == TinyOp::sum ? torch::ones({}) : torch::ones({2, 2})) {}
  void run() override {
    switch (op_) {
      case TinyOp::add: y_ = a_ + b_; break;
      case TinyOp::mul: y_ = a_ * b_; break;
      case TinyOp::relu: y_ = torch::relu(a_); break;
      case TinyOp::sum: y_ = a_.sum(); break;
      case TinyOp::matmul: y_ = torch::matmul(a_, b_); break;
    }
    y_.backward(dy_);
    a_.mutable_grad().reset();
    b_.mutable_grad().reset();
  }
  double value() const override { return y_.sum().item<double>(); }

 private:
  TinyOp op_;
  torch::Tensor a_, b_, dy_, y_;
};

// float32 on the GPU as mixgrad computes it: no TF32. LibTorch's default
// keeps TF32 off for cuBLAS but on for cuDNN's convolutions.
void float32_without_tf32() {
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
}

}  // namespace

std::unique_ptr<Runner> make_trainer(Model model, Precision precision, int device) {
  torch::manual_seed(0);
  if (device != kCpu) float32_without_tf32();
  return std::make_unique<Trainer>(model, precision, device);
}

std::unique_ptr<Runner> make_matmul(int64_t m, int64_t k, int64_t n, Precision precision, int device) {
  torch::manual_seed(0);
  if (device != kCpu) float32_without_tf32();
  return std::make_unique<Matmul>(m, k, n, precision, device);
}

int cuda_device_count(const char** why) {
  // Loads LibTorch's CUDA backend once (it registers itself on load); the
  // handle is kept for the life of the process. The reason for a failure
  // (dlerror's text) is kept too, for the benchmark's header.
  static const std::string load_error = [] {
    const char* names[] = {
#ifdef MIXGRAD_BENCH_TORCH_LIBDIR
        MIXGRAD_BENCH_TORCH_LIBDIR "/libtorch_cuda.so",
#endif
        "libtorch_cuda.so"};
    std::string err = "libtorch_cuda.so not found";
    for (const char* n : names) {
      if (dlopen(n, RTLD_NOW | RTLD_GLOBAL)) return std::string();
      if (const char* e = dlerror()) err = e;
    }
    return "LibTorch has no CUDA here (a CPU-only LibTorch, or its NVIDIA libraries missing or older than "
           "the CUDA runtime mixgrad loaded): " + err;
  }();
  const int n = load_error.empty() && torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (n == 0 && why) *why = load_error.empty() ? "LibTorch sees no CUDA device" : load_error.c_str();
  return n;
}

void synchronize(int device) {
  if (device != kCpu) torch::cuda::synchronize(device);
}

int64_t peak_memory(int device) {
#if MIXGRAD_TORCH_MEMORY_STATS
  if (device == kCpu) return -1;
  const auto stats = at::accelerator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
#else
  (void)device;
  return -1;
#endif
}

void reset_peak_memory(int device) {
#if MIXGRAD_TORCH_MEMORY_STATS
  if (device != kCpu) at::accelerator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
#else
  (void)device;
#endif
}

std::unique_ptr<Runner> make_tiny_op(TinyOp op) {
  torch::manual_seed(0);
  return std::make_unique<Tiny>(op);
}

void set_threads(int n) { torch::set_num_threads(n); }

const char* version() { return TORCH_VERSION; }

}  // namespace perf::libtorch_side
