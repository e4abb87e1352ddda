// torchvision's weight initialisation of its classification models, shared
// by VGG and ResNet.
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::models::detail {

/// What torchvision's constructors do to every Linear layer.
enum class LinearInit : uint8_t {
  keep,       // PyTorch's default (ResNet)
  normal_001  // weight N(0, 0.01), bias 0 (VGG)
};

/// Every Conv2d of `model` and its descendants: weight kaiming_normal
/// (fan_out, relu), bias 0; every BatchNorm2d: weight 1, bias 0; every
/// Linear as `linear` says. Not recorded by any GradManager.
void init_like_torchvision(nn::Module& model, LinearInit linear);

}  // namespace mixgrad::models::detail
