// mixgrad/models/vgg.hpp — torchvision's VGG-16 (Simonyan & Zisserman, 2014),
// with and without batch norm: the same layers in the same places, so the
// state-dict names are torchvision's ("features.0.weight",
// "classifier.6.bias"; with batch norm "features.1.running_mean") and its
// weights load (mixgrad/models/weights.hpp).
//
//   auto net = mg::models::vgg16();                       // 1000 classes, torchvision's init
//   mg::models::load_weights(net, "vgg16.safetensors");   // from scripts/convert_torch_checkpoint.py
//   net["classifier"][6] = mg::nn::Linear(4096, 10);      // torch: net.classifier[6] = nn.Linear(4096, 10)
//   net["features"].freeze();                             // train the classifier only
//   auto logits = net(x);                                 // x: [N, 3, H, W], H, W >= 32
//
// features: 13 conv3x3 (padding 1) + ReLU, [+ BatchNorm2d between them in
// vgg16_bn], with a 2x2 max pool after each of the 5 stages (64, 128, 256,
// 512, 512 channels); avgpool: AdaptiveAvgPool2d(7); classifier: Linear(25088,
// 4096), ReLU, Dropout, Linear(4096, 4096), ReLU, Dropout, Linear(4096,
// num_classes). Initialised as torchvision does: conv weights kaiming_normal
// (fan_out, relu) with zero bias, batch norm weight 1 and bias 0, linear
// weights N(0, 0.01) with zero bias.
#pragma once

#include <memory>
#include <vector>

#include "mixgrad/nn/pooling.hpp"
#include "mixgrad/nn/sequential.hpp"

namespace mixgrad::models {

struct VGGOptions {
  int64_t num_classes = 1000;
  /// The probability of both Dropout layers of the classifier.
  double dropout = 0.5;
};

class VGG : public nn::Module {
 public:
  /// A VGG over the convolutional `features` (their last stage must have 512
  /// channels). Throws ValueError for num_classes < 1 or a dropout outside [0, 1].
  explicit VGG(nn::Sequential features, const VGGOptions& options = {});

  /// features, avgpool, flatten, classifier; [N, 3, H, W] -> [N, num_classes].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "VGG"; }

  nn::Sequential& features() { return *features_; }
  nn::Sequential& classifier() { return *classifier_; }

 private:
  std::shared_ptr<nn::Sequential> features_;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<nn::Sequential> classifier_;
};

/// torchvision's make_layers: for each entry of `config` a conv3x3 (padding 1)
/// to that many channels, [BatchNorm2d,] ReLU; 0 stands for a 2x2 max pool
/// ("M" in torchvision's configurations). Starts from 3 channels.
nn::Sequential vgg_features(const std::vector<int64_t>& config, bool batch_norm);

/// torchvision.models.vgg16(weights=None): configuration "D" without batch norm.
VGG vgg16(const VGGOptions& options = {});
/// torchvision.models.vgg16_bn(weights=None): configuration "D" with batch norm.
VGG vgg16_bn(const VGGOptions& options = {});

}  // namespace mixgrad::models
