// mixgrad/models/weights.hpp — loading PyTorch's weights (torchvision's
// pretrained models, or any model trained in PyTorch whose layout a mixgrad
// model reproduces) from a safetensors file written by
// scripts/convert_torch_checkpoint.py:
//
//   $ python3 scripts/convert_torch_checkpoint.py resnet18-f37072fd.pth resnet18.safetensors
//
//   auto net = mg::models::resnet18();
//   mg::models::load_weights(net, "resnet18.safetensors");
//
// PyTorch's BatchNorm2d saves a third buffer, "num_batches_tracked" (the
// number of training batches seen, an int64 scalar), which mixgrad's
// BatchNorm2d does not keep: it uses its fixed momentum, as torch does unless
// momentum is None. load_weights drops that key for each BatchNorm2d of the
// model (strip_num_batches_tracked) and for nothing else; any other key the
// model lacks, or a key it has that the file lacks, is an error.
#pragma once

#include <filesystem>

#include "mixgrad/nn/module.hpp"
#include "mixgrad/state_dict.hpp"

namespace mixgrad::models {

/// `dict` without the "<name>.num_batches_tracked" entries of the modules of
/// `model` that are BatchNorm2d ("layer1.0.bn1.num_batches_tracked"). Such an
/// entry must be an integer tensor of one element (torch's int64 scalar);
/// another is a ValueError naming the key. A "num_batches_tracked" key of a
/// module that is not a BatchNorm2d, or of no module, stays in the result,
/// so a strict load reports it as unexpected.
StateDict strip_num_batches_tracked(const StateDict& dict, const nn::Module& model);

/// Reads the safetensors file `path` into `model`'s parameters and buffers:
/// io::load_file, strip_num_batches_tracked, then Module::load_state_dict
/// (strict). Everything is checked before anything is copied, so a throw
/// leaves the model as it was: IOError naming the file for a file that is
/// missing or malformed; ValueError naming the file and the missing and
/// unexpected keys for a file of another architecture (say resnet50's
/// weights for a resnet18); ShapeError naming the file, the key and both
/// shapes for a tensor of another shape (a 1000-class head into a
/// 10-class model: swap the head after loading); DTypeError for another dtype
/// (the convert script keeps torch's dtypes; convert float16 checkpoints
/// to float32 with its --dtype float32).
void load_weights(nn::Module& model, const std::filesystem::path& path);

}  // namespace mixgrad::models
