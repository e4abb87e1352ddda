#include "mixgrad/models/resnet.hpp"

#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/nn/init.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "models/torchvision_init.hpp"

namespace mixgrad::models {

namespace {

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2d(in, out, 3, {.stride = stride, .padding = 1, .bias = false});
}

nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2d(in, out, 1, {.stride = stride, .bias = false});
}

}  // namespace

// Registration follows torchvision's __init__ (conv1, bn1, relu, conv2, bn2,
// downsample): the order of the state dict and of the printed tree.
BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, std::shared_ptr<nn::Sequential> downsample)
    : conv1_(register_module("conv1", conv3x3(inplanes, planes, stride))),
      bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
      relu_(register_module("relu", nn::ReLU())),
      conv2_(register_module("conv2", conv3x3(planes, planes))),
      bn2_(register_module("bn2", nn::BatchNorm2d(planes))) {
  if (downsample) downsample_ = register_module("downsample", std::move(downsample));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*relu_)((*bn1_)((*conv1_)(x)));
  out = (*bn2_)((*conv2_)(out));
  return (*relu_)(out + (downsample_ ? (*downsample_)(x) : x));
}

// torchvision's order: conv1, bn1, conv2, bn2, conv3, bn3, relu, downsample.
Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, std::shared_ptr<nn::Sequential> downsample)
    : conv1_(register_module("conv1", conv1x1(inplanes, planes))),
      bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
      conv2_(register_module("conv2", conv3x3(planes, planes, stride))),
      bn2_(register_module("bn2", nn::BatchNorm2d(planes))),
      conv3_(register_module("conv3", conv1x1(planes, planes * kExpansion))),
      bn3_(register_module("bn3", nn::BatchNorm2d(planes * kExpansion))),
      relu_(register_module("relu", nn::ReLU())) {
  if (downsample) downsample_ = register_module("downsample", std::move(downsample));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = (*relu_)((*bn1_)((*conv1_)(x)));
  out = (*relu_)((*bn2_)((*conv2_)(out)));
  out = (*bn3_)((*conv3_)(out));
  return (*relu_)(out + (downsample_ ? (*downsample_)(x) : x));
}

ResNet::ResNet(ResNetBlock block, const std::array<int64_t, 4>& layers, const ResNetOptions& options) {
  if (options.num_classes < 1)
    throw ValueError("ResNet: num_classes must be >= 1, got " + std::to_string(options.num_classes));
  for (const int64_t n : layers)
    if (n < 1) throw ValueError("ResNet: each layer needs >= 1 block, got " + std::to_string(n));
  conv1_ = register_module("conv1", nn::Conv2d(3, 64, 7, {.stride = 2, .padding = 3, .bias = false}));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  relu_ = register_module("relu", nn::ReLU());
  maxpool_ = register_module("maxpool", nn::MaxPool2d(3, {.stride = 2, .padding = 1}));
  const int64_t planes[4] = {64, 128, 256, 512};
  for (size_t i = 0; i < 4; ++i)
    layers_[i] = register_module("layer" + std::to_string(i + 1),
                                 make_layer(block, planes[i], layers[i], i == 0 ? 1 : 2));
  avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  const int64_t expansion = block == ResNetBlock::basic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
  fc_ = register_module("fc", nn::Linear(512 * expansion, options.num_classes));

  detail::init_like_torchvision(*this, detail::LinearInit::keep);
  if (options.zero_init_residual) {
    for (const auto& layer : layers_)
      for (const auto& [name, b] : layer->named_children()) {
        if (auto* basic = dynamic_cast<BasicBlock*>(b.get())) nn::init::zeros_(basic->last_norm().weight());
        if (auto* bottleneck = dynamic_cast<Bottleneck*>(b.get())) nn::init::zeros_(bottleneck->last_norm().weight());
      }
  }
}

// torchvision's _make_layer: the first block takes the stride and, where
// the stride or the width changes, the downsample shortcut.
nn::Sequential ResNet::make_layer(ResNetBlock block, int64_t planes, int64_t blocks, int64_t stride) {
  const int64_t expansion = block == ResNetBlock::basic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
  const int64_t width = planes * expansion;
  std::shared_ptr<nn::Sequential> downsample;
  if (stride != 1 || inplanes_ != width)
    downsample = std::make_shared<nn::Sequential>(conv1x1(inplanes_, width, stride), nn::BatchNorm2d(width));
  nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    auto ds = i == 0 ? downsample : nullptr;
    if (block == ResNetBlock::basic)
      layer.push_back(BasicBlock(inplanes_, planes, s, ds));
    else
      layer.push_back(Bottleneck(inplanes_, planes, s, ds));
    inplanes_ = width;
  }
  return layer;
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor y = (*maxpool_)((*relu_)((*bn1_)((*conv1_)(x))));
  for (const auto& layer : layers_) y = (*layer)(y);
  return (*fc_)(F::flatten((*avgpool_)(y), 1));
}

nn::Sequential& ResNet::layer(int i) {
  if (i < 1 || i > 4) throw ValueError("ResNet::layer: i must be 1..4, got " + std::to_string(i));
  return *layers_[static_cast<size_t>(i - 1)];
}

ResNet resnet18(const ResNetOptions& options) { return ResNet(ResNetBlock::basic, {2, 2, 2, 2}, options); }

ResNet resnet50(const ResNetOptions& options) { return ResNet(ResNetBlock::bottleneck, {3, 4, 6, 3}, options); }

}  // namespace mixgrad::models
