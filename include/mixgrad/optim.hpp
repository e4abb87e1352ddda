// mixgrad/optim.hpp — the optimizers mg::optim::{SGD, Adam, AdamW}, learning-rate
// schedules (StepLR, CosineAnnealingLR, LinearLR, OneCycleLR, SequentialLR) and
// gradient clipping (clip_grad_norm).
//
//   mg::optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
//   opt.step().clear_grad();
#pragma once

#include "mixgrad/optim/adam.hpp"
#include "mixgrad/optim/adamw.hpp"
#include "mixgrad/optim/clip_grad.hpp"
#include "mixgrad/optim/lr_scheduler.hpp"
#include "mixgrad/optim/optimizer.hpp"
#include "mixgrad/optim/sgd.hpp"
