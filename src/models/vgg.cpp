#include "mixgrad/models/vgg.hpp"

#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/nn/activation.hpp"
#include "mixgrad/nn/batch_norm.hpp"
#include "mixgrad/nn/conv.hpp"
#include "mixgrad/nn/dropout.hpp"
#include "mixgrad/nn/linear.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "models/torchvision_init.hpp"

namespace mixgrad::models {

namespace {

// torchvision's cfgs["D"]; 0 is a max pool ("M").
const std::vector<int64_t> kConfigD = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};

nn::Sequential make_classifier(const VGGOptions& options) {
  if (options.num_classes < 1)
    throw ValueError("VGG: num_classes must be >= 1, got " + std::to_string(options.num_classes));
  return nn::Sequential(nn::Linear(512 * 7 * 7, 4096), nn::ReLU(), nn::Dropout(options.dropout),
                        nn::Linear(4096, 4096), nn::ReLU(), nn::Dropout(options.dropout),
                        nn::Linear(4096, options.num_classes));
}

}  // namespace

VGG::VGG(nn::Sequential features, const VGGOptions& options) {
  nn::Sequential classifier = make_classifier(options);  // throws before anything is registered
  features_ = register_module("features", std::move(features));
  avgpool_ = register_module("avgpool", nn::AdaptiveAvgPool2d(7));
  classifier_ = register_module("classifier", std::move(classifier));
  detail::init_like_torchvision(*this, detail::LinearInit::normal_001);
}

Tensor VGG::forward(const Tensor& x) {
  return (*classifier_)(F::flatten((*avgpool_)((*features_)(x)), 1));
}

nn::Sequential vgg_features(const std::vector<int64_t>& config, bool batch_norm) {
  nn::Sequential layers;
  int64_t channels = 3;
  for (const int64_t v : config) {
    if (v < 0) throw ValueError("vgg_features: a layer width must be >= 1 (or 0 for a max pool), got " +
                                std::to_string(v));
    if (v == 0) {
      layers.push_back(nn::MaxPool2d(2, {.stride = 2}));
      continue;
    }
    layers.push_back(nn::Conv2d(channels, v, 3, {.padding = 1}));
    if (batch_norm) layers.push_back(nn::BatchNorm2d(v));
    layers.push_back(nn::ReLU());
    channels = v;
  }
  return layers;
}

VGG vgg16(const VGGOptions& options) { return VGG(vgg_features(kConfigD, false), options); }

VGG vgg16_bn(const VGGOptions& options) { return VGG(vgg_features(kConfigD, true), options); }

}  // namespace mixgrad::models
