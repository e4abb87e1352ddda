#include "mixgrad/optim/adamw.hpp"

namespace mixgrad::optim {

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam(std::move(params),
           AdamOptions{.lr = options.lr,
                       .betas = options.betas,
                       .eps = options.eps,
                       .weight_decay = options.weight_decay,
                       .amsgrad = options.amsgrad,
                       .master_weights = options.master_weights,
                       .step_supports_amp_scaling = options.step_supports_amp_scaling},
           true, "AdamW") {}

}  // namespace mixgrad::optim
