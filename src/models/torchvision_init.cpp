#include "models/torchvision_init.hpp"

#include "mixgrad/nn/batch_norm.hpp"
#include "mixgrad/nn/conv.hpp"
#include "mixgrad/nn/init.hpp"
#include "mixgrad/nn/linear.hpp"

namespace mixgrad::models::detail {

namespace {

void init_one(nn::Module& m, LinearInit linear) {
  namespace init = nn::init;
  if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) {
    init::kaiming_normal_(conv->weight(), {.mode = init::FanMode::fan_out, .nonlinearity = init::Nonlinearity::relu});
    if (conv->bias().defined()) init::zeros_(conv->bias());
  } else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) {
    if (bn->weight().defined()) init::ones_(bn->weight());
    if (bn->bias().defined()) init::zeros_(bn->bias());
  } else if (auto* fc = dynamic_cast<nn::Linear*>(&m); fc && linear == LinearInit::normal_001) {
    init::normal_(fc->weight(), 0.0, 0.01);
    if (fc->bias().defined()) init::zeros_(fc->bias());
  }
}

}  // namespace

// torchvision walks self.modules(): the module itself, then its descendants
// depth first in registration order; the random draws follow that order.
void init_like_torchvision(nn::Module& model, LinearInit linear) {
  init_one(model, linear);
  for (const auto& child : model.children()) init_like_torchvision(*child, linear);
}

}  // namespace mixgrad::models::detail
