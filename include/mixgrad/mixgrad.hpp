// mixgrad/mixgrad.hpp — everything, for `#include <mixgrad/mixgrad.hpp>`.
//
//   namespace mg = mixgrad;
//   mg::autodiff::GradManager gm;  mg::amp::GradScaler scaler;  mg::F::relu(x);
//   mg::io::save_checkpoint("ckpt/", {.model = &net, .optimizer = &opt, .step = step});
#pragma once

#include "mixgrad/allocator.hpp"
#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/amp/grad_scaler.hpp"
#include "mixgrad/amp/initialize.hpp"
#include "mixgrad/amp/scale_loss.hpp"
#include "mixgrad/autodiff/checkpoint.hpp"
#include "mixgrad/autodiff/freeze.hpp"
#include "mixgrad/autodiff/function.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/autodiff/grad_manager_group.hpp"
#include "mixgrad/autodiff/no_grad.hpp"
#include "mixgrad/cpu.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/data.hpp"
#include "mixgrad/device.hpp"
#include "mixgrad/dtype.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/functional.hpp"
#include "mixgrad/half.hpp"
#include "mixgrad/io/checkpoint.hpp"
#include "mixgrad/io/safetensors.hpp"
#include "mixgrad/models/resnet.hpp"
#include "mixgrad/models/vgg.hpp"
#include "mixgrad/models/weights.hpp"
#include "mixgrad/nn.hpp"
#include "mixgrad/optim.hpp"
#include "mixgrad/runtime.hpp"
#include "mixgrad/shape.hpp"
#include "mixgrad/state_dict.hpp"
#include "mixgrad/tensor.hpp"
#include "mixgrad/train/progress_bar.hpp"
#include "mixgrad/train/runner.hpp"
