// mixgrad/io/checkpoint.hpp — save a training run and resume it exactly.
//
// A checkpoint is one safetensors file (mixgrad/io/safetensors.hpp) holding
// everything a run needs to continue as if never stopped: the model's
// parameters and buffers, the optimizer's state (momenta, Adam moments, step
// counts, hyper-parameters, float32 master weights), the learning-rate
// scheduler's position, the GradScaler's state, the training step, the
// global random generator (dropout, initialisation, shuffling), the data
// loader's shuffling seed and position (the epoch and how many of its
// batches were handed out: a checkpoint taken mid-epoch resumes with the
// next batch), and the autocast settings. mg::train::Runner saves and
// resumes all of this for you, at any step.
//
//   // at the end of each epoch
//   mg::io::save_checkpoint("ckpt/", {.model = &net, .optimizer = &opt, .scaler = &scaler,
//                                     .loader = &loader, .step = step});
//   // in a new process, after building the same objects
//   if (auto latest = mg::io::latest_checkpoint("ckpt/")) {
//     auto info = mg::io::load_checkpoint(*latest, {.model = &net, .optimizer = &opt,
//                                                   .scaler = &scaler, .loader = &loader});
//     step = info.step;                    // loader.position(): where the next begin() continues
//   }
//
// Keys are namespaced by part: "model.<name>" (Module::state_dict),
// "optimizer.<key>" (Optimizer::state_dict), "scheduler.<key>"
// (LRScheduler::state_dict), "scaler.<key>" (GradScaler::state_dict). The scalars go to the
// metadata as decimal strings: "mixgrad.step", "mixgrad.rng.seed",
// "mixgrad.loader.epoch", "mixgrad.loader.batch" (with the loader's
// "samples" and "batch_size", checked on load), "mixgrad.autocast.low_prec_dtype", the kinds
// "mixgrad.optimizer" and "mixgrad.scheduler" ("CosineAnnealingLR"), ... and the
// caller's own metadata under "user.<key>".
//
// Loading checks everything first — the file (IOError for a truncated or
// corrupt file), then every requested part against its object (missing,
// unexpected, wrong-shape or wrong-dtype keys, an optimizer of another
// kind) — and throws IOError naming the file, the key and what was expected
// and found before anything is changed. Only then are the model, optimizer,
// scaler, loader, generator and autocast settings set.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "mixgrad/io/safetensors.hpp"

namespace mixgrad::nn {
class Module;
}
namespace mixgrad::optim {
class Optimizer;
class LRScheduler;
}
namespace mixgrad::amp {
class GradScaler;
}
namespace mixgrad::data {
class DataLoader;
}

namespace mixgrad::io {

/// The parts of a run to save or to load into; a null pointer leaves that
/// part out (on load: the file's part, if any, is ignored).
struct Checkpoint {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  /// The learning-rate schedule (of `optimizer`); loaded after the
  /// optimizer, it sets the optimizer's lr to the schedule's value.
  optim::LRScheduler* scheduler = nullptr;
  amp::GradScaler* scaler = nullptr;
  data::DataLoader* loader = nullptr;  ///< its shuffling seed and position()
  int64_t step = 0;                    ///< saved; load returns it in CheckpointInfo
  bool rng = true;                     ///< the global generator's seed and position
  bool autocast = true;                ///< amp::enabled, low_prec_dtype, high_prec_dtype
  Metadata metadata = {};              ///< saved as "user.<key>"; load returns it in CheckpointInfo
};

/// What load_checkpoint read besides the objects' state.
struct CheckpointInfo {
  std::filesystem::path path;  ///< the file loaded
  int64_t step = 0;
  Metadata metadata;  ///< the caller's metadata, without the "user." prefix
};

/// "checkpoint-00000042.safetensors": the name save_checkpoint gives the
/// checkpoint of `step` in a directory (zero-padded, so names sort by step).
std::filesystem::path checkpoint_path(const std::filesystem::path& dir, int64_t step);

/// The checkpoint of the highest step in `dir` (files named as
/// checkpoint_path names them), or nothing when there is none.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir);

/// Writes the parts atomically to `dir_or_file`: into an existing directory
/// as checkpoint_path(dir, step), otherwise to that file. Returns the path
/// written. Throws IOError when it cannot write (the old file stays),
/// ValueError for step < 0.
std::filesystem::path save_checkpoint(const std::filesystem::path& dir_or_file, const Checkpoint& parts);

/// Loads `dir_or_file` (a directory: its latest_checkpoint) into the parts
/// given. Everything is validated before anything is set; any problem throws
/// IOError naming the file, the key and expected vs found, with every part
/// left as it was. parts.step and parts.metadata are not read.
CheckpointInfo load_checkpoint(const std::filesystem::path& dir_or_file, const Checkpoint& parts);

}  // namespace mixgrad::io
