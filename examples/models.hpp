// examples/models.hpp — the three small models the examples and the
// benchmarks train on 28x28 grayscale images with 10 classes.
//
//   auto net = models::make_cnn();                 // an nn::Sequential
//   mg::autodiff::GradManager gm;
//   gm.attach(net.parameters());
//   mg::optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
//   auto logits = net(x);                          // x: float32[N, 1, 28, 28]
//
// - make_mlp():    Flatten, 784-1024-1024-10 with ReLU (takes [N, 784] or
//                  [N, 1, 28, 28]).
// - make_cnn():    2 x [conv3x3 pad 1 + BatchNorm2d + ReLU + maxpool 2] with
//                  32 and 64 channels, Flatten, Linear 3136-128, ReLU,
//                  Linear 128-10.
// - make_resnet(): stem conv3x3 16 + BN + ReLU, three stages of two
//                  BasicBlocks (16, 32, 64 channels; stride 2 at the start of
//                  stages 2 and 3, where the shortcut is a 1x1 conv + BN),
//                  global average pool, Linear 64-10.
//
// The benchmarks under tests/perf build the same architectures in LibTorch;
// a change here must be mirrored there (tests/perf/libtorch_side.cpp).
#pragma once

#include <memory>
#include <string>

#include "mixgrad/functional.hpp"
#include "mixgrad/nn.hpp"

namespace models {

namespace mg = mixgrad;

inline constexpr int64_t kClasses = 10;

/// The MLP: 784-1024-1024-10 with ReLU between the layers.
inline mg::nn::Sequential make_mlp() {
  return mg::nn::Sequential(mg::nn::Flatten(), mg::nn::Linear(784, 1024), mg::nn::ReLU(), mg::nn::Linear(1024, 1024),
                            mg::nn::ReLU(), mg::nn::Linear(1024, kClasses));
}

/// The CNN: conv-bn-relu-pool twice (32, 64 channels), then a 3136-128-10 head.
inline mg::nn::Sequential make_cnn() {
  return mg::nn::Sequential(mg::nn::Conv2d(1, 32, 3, {.padding = 1}), mg::nn::BatchNorm2d(32), mg::nn::ReLU(),
                            mg::nn::MaxPool2d(2), mg::nn::Conv2d(32, 64, 3, {.padding = 1}), mg::nn::BatchNorm2d(64),
                            mg::nn::ReLU(), mg::nn::MaxPool2d(2), mg::nn::Flatten(), mg::nn::Linear(64 * 7 * 7, 128),
                            mg::nn::ReLU(), mg::nn::Linear(128, kClasses));
}

/// A ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)),
/// where the shortcut is the identity, or a strided 1x1 conv + BN when the
/// stride or the channel count changes. Convolutions followed by BN have no bias.
class BasicBlock : public mg::nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride)
      : conv1_(register_module("conv1", mg::nn::Conv2d(in_channels, out_channels, 3,
                                                       {.stride = stride, .padding = 1, .bias = false}))),
        bn1_(register_module("bn1", mg::nn::BatchNorm2d(out_channels))),
        conv2_(register_module("conv2", mg::nn::Conv2d(out_channels, out_channels, 3, {.padding = 1, .bias = false}))),
        bn2_(register_module("bn2", mg::nn::BatchNorm2d(out_channels))) {
    if (stride != 1 || in_channels != out_channels)
      shortcut_ = register_module(
          "shortcut", mg::nn::Sequential(mg::nn::Conv2d(in_channels, out_channels, 1, {.stride = stride, .bias = false}),
                                         mg::nn::BatchNorm2d(out_channels)));
  }

  mg::Tensor forward(const mg::Tensor& x) override {
    mg::Tensor y = mg::F::relu((*bn1_)((*conv1_)(x)));
    y = (*bn2_)((*conv2_)(y));
    return mg::F::relu(y + (shortcut_ ? (*shortcut_)(x) : x));
  }
  std::string describe() const override { return "BasicBlock"; }

 private:
  std::shared_ptr<mg::nn::Conv2d> conv1_;
  std::shared_ptr<mg::nn::BatchNorm2d> bn1_;
  std::shared_ptr<mg::nn::Conv2d> conv2_;
  std::shared_ptr<mg::nn::BatchNorm2d> bn2_;
  std::shared_ptr<mg::nn::Sequential> shortcut_;  // null: identity
};

/// The small ResNet for 28x28 grayscale input (about 175k parameters).
inline mg::nn::Sequential make_resnet() {
  return mg::nn::Sequential(mg::nn::Conv2d(1, 16, 3, {.padding = 1, .bias = false}), mg::nn::BatchNorm2d(16),
                            mg::nn::ReLU(), BasicBlock(16, 16, 1), BasicBlock(16, 16, 1), BasicBlock(16, 32, 2),
                            BasicBlock(32, 32, 1), BasicBlock(32, 64, 2), BasicBlock(64, 64, 1),
                            mg::nn::AdaptiveAvgPool2d(1), mg::nn::Flatten(), mg::nn::Linear(64, kClasses));
}

}  // namespace models
