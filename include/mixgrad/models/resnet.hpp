// mixgrad/models/resnet.hpp — torchvision's ResNet-18 and ResNet-50 (He et
// al., 2015; torchvision's "v1.5": a Bottleneck strides in its 3x3 conv),
// with torchvision's layers in torchvision's places, so the state-dict names
// are its own ("conv1.weight", "bn1.running_mean",
// "layer1.0.conv1.weight", "layer2.0.downsample.0.weight", "fc.weight") and
// its weights load (mixgrad/models/weights.hpp).
//
//   auto net = mg::models::resnet18();                    // 1000 classes, torchvision's init
//   mg::models::load_weights(net, "resnet18.safetensors");
//   net["fc"] = mg::nn::Linear(512, 10);                  // torch: net.fc = nn.Linear(512, 10)
//   net.freeze();  net["fc"].unfreeze();                  // train the head only
//   auto logits = net(x);                                 // x: [N, 3, H, W]
//
// conv1 (7x7, stride 2, 64 channels), bn1, relu, maxpool (3x3, stride 2,
// padding 1), layer1..layer4 (Sequentials of blocks, 64, 128, 256, 512
// planes, layer2..4 starting with stride 2), avgpool (AdaptiveAvgPool2d(1)),
// flatten, fc. A block's shortcut is `downsample` (conv1x1 + BatchNorm2d)
// where the stride or the width changes, else the identity. Initialised as
// torchvision does: conv weights kaiming_normal (fan_out, relu), batch norm
// weight 1 and bias 0, fc PyTorch's Linear default; with zero_init_residual
// the last batch norm of each block starts at weight 0.
#pragma once

#include <array>
#include <memory>

#include "mixgrad/nn/activation.hpp"
#include "mixgrad/nn/batch_norm.hpp"
#include "mixgrad/nn/conv.hpp"
#include "mixgrad/nn/linear.hpp"
#include "mixgrad/nn/pooling.hpp"
#include "mixgrad/nn/sequential.hpp"

namespace mixgrad::models {

/// ResNet-18/34's block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)),
/// 3x3 convs, `planes` channels out (expansion 1).
class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  /// `downsample` empty (nullptr) for the identity shortcut.
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, std::shared_ptr<nn::Sequential> downsample);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "BasicBlock"; }
  /// The block's last batch norm (zero_init_residual sets its weight to 0).
  nn::BatchNorm2d& last_norm() { return *bn2_; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::Conv2d> conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn2_;
  std::shared_ptr<nn::Sequential> downsample_;  // null: identity
};

/// ResNet-50/101/152's block: 1x1 to `planes`, 3x3 (with the stride), 1x1 to
/// 4 * planes channels, each followed by batch norm, plus the shortcut.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, std::shared_ptr<nn::Sequential> downsample);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "Bottleneck"; }
  nn::BatchNorm2d& last_norm() { return *bn3_; }

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::Conv2d> conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn2_;
  std::shared_ptr<nn::Conv2d> conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn3_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::Sequential> downsample_;  // null: identity
};

enum class ResNetBlock : uint8_t { basic, bottleneck };

struct ResNetOptions {
  int64_t num_classes = 1000;
  /// Start each block's last batch norm at weight 0, so every block begins
  /// as the identity (torchvision's zero_init_residual; off by default).
  bool zero_init_residual = false;
};

class ResNet : public nn::Module {
 public:
  /// `layers`: the number of blocks in layer1..layer4 ({2, 2, 2, 2} for
  /// ResNet-18 with basic blocks, {3, 4, 6, 3} for ResNet-50 with
  /// bottlenecks). Throws ValueError for a count < 1 or num_classes < 1.
  ResNet(ResNetBlock block, const std::array<int64_t, 4>& layers, const ResNetOptions& options = {});

  /// [N, 3, H, W] -> [N, num_classes].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "ResNet"; }

  /// layer1..layer4 for i = 1..4; throws ValueError otherwise.
  nn::Sequential& layer(int i);
  nn::Linear& fc() { return *fc_; }

 private:
  nn::Sequential make_layer(ResNetBlock block, int64_t planes, int64_t blocks, int64_t stride);

  int64_t inplanes_ = 64;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::MaxPool2d> maxpool_;
  std::array<std::shared_ptr<nn::Sequential>, 4> layers_;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<nn::Linear> fc_;
};

/// torchvision.models.resnet18(weights=None): basic blocks, {2, 2, 2, 2}.
ResNet resnet18(const ResNetOptions& options = {});
/// torchvision.models.resnet50(weights=None): bottlenecks, {3, 4, 6, 3}.
ResNet resnet50(const ResNetOptions& options = {});

}  // namespace mixgrad::models
