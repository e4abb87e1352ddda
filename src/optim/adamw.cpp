#include "mixgrad/optim/adamw.hpp"

namespace mixgrad::optim {

namespace {
AdamOptions as_adam(const AdamWOptions& o) {
  return {.lr = o.lr,
          .betas = o.betas,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad,
          .master_weights = o.master_weights,
          .step_supports_amp_scaling = o.step_supports_amp_scaling};
}
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{.params = std::move(params), .options = {}}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Adam(std::move(groups), as_adam(options), true, "AdamW") {}

}  // namespace mixgrad::optim
