// The state amp::initialize starts and amp::scale_loss works on: apex's
// `_amp_state`, owned by the Amp handle and shared with the open scopes, so
// a scope that outlives its handle still ends safely.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/amp/initialize.hpp"

namespace mixgrad::amp::detail {

struct FrontendState {
  Properties properties;
  /// One per loss_id.
  std::vector<GradScaler> scalers;
  /// The scale of each fixed-scale scaler, on the host (scale_loss passes the
  /// loss through at a fixed 1 without master weights, as apex).
  std::vector<double> fixed_scales;

  /// An optimizer initialize saw, with its parameters' ids, so another
  /// optimizer later built at the same address is not taken for it.
  struct Seen {
    const optim::Optimizer* optimizer;
    std::vector<uint64_t> parameter_ids;
  };
  std::vector<Seen> optimizers;
  std::vector<const nn::Module*> models;
  /// Optimizers with a scale_loss scope open now.
  std::vector<const optim::Optimizer*> open;

  /// An error a scope's destructor could not throw: thrown by the next call.
  std::exception_ptr deferred_error;

  /// What patch_functions changed in the global autocast settings.
  bool set_autocast = false;
  bool saved_enabled = false;
  bool set_low_prec_dtype = false;
  bool saved_low_prec_was_set = false;
  DType saved_low_prec_dtype = DType::bfloat16;

  bool saw(const optim::Optimizer& opt) const;
  /// ValueError unless 0 <= loss_id < num_losses.
  void check_loss_id(int loss_id, const char* op) const;
  /// Throws (and clears) the deferred error, if any, with `op` named.
  void throw_deferred(const char* op);
};

/// The live state, or null when no handle lives.
std::shared_ptr<FrontendState> live_state();

/// Throws the exception of `error` again, as the same mixgrad error type,
/// with `prefix` before its message.
[[noreturn]] void rethrow_prefixed(const std::exception_ptr& error, const std::string& prefix);

}  // namespace mixgrad::amp::detail
