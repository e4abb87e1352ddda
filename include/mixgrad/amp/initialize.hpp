// mixgrad/amp/initialize.hpp — apex's front end: amp::initialize and its opt levels.
//
// NVIDIA apex's `amp.initialize(model, optimizer, opt_level="O2")` in one
// call: it casts the models, gives the optimizers float32 master weights,
// turns autocast on and builds one loss scaler per loss, as the opt level
// says. The rest of an apex loop is amp::scale_loss (scale_loss.hpp):
//
//   mg::nn::Sequential net = make_model();            // on its device, float32
//   mg::optim::Adam opt(net.parameters(), {.lr = 1e-3});
//   mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O2"});
//   for (auto [x, y] : loader) {
//     opt.zero_grad();
//     auto rec = gm.record();
//     mg::Tensor loss = mg::F::l1_loss(net(x), y);     // x float32: the model casts it
//     mg::amp::scale_loss(loss, opt, [&](const mg::Tensor& scaled_loss) { gm.backward(scaled_loss); });
//     opt.step();                                      // skipped on the device after an overflow
//   }
//
// The opt levels, apex's property table (the low-precision dtype, "16-bit"
// below, is bfloat16 for CPU models and float16 for CUDA ones unless
// `.low_prec_dtype` or mg::amp::low_prec_dtype says otherwise):
//
//   level  cast_model_type  patch_functions  keep_batchnorm_fp32  master_weights  loss_scale
//   O0     float32          false            -                    false           1.0
//   O1     -                true             -                    -               dynamic
//   O2     16-bit           false            true                 true            dynamic
//   O3     16-bit           false            false                false           1.0
//
// Each property of the table can be overridden in InitializeOptions. What
// each does, the overrides apex refuses (refused here too: ValueError) and
// where this differs from apex: docs/apex.md.
//
// initialize returns an `Amp` handle that owns the loss scalers and
// remembers the models and optimizers it initialized. While it lives,
// amp::scale_loss, amp::state_dict and amp::load_state_dict use it; a
// second initialize is refused. Its destruction ends it: the global
// autocast switch is restored and the free functions refuse again. The
// models and optimizers keep what initialize did to them (16-bit weights,
// call casts, master weights). Like a GradScaler, the state is for one
// training thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixgrad/amp/grad_scaler.hpp"
#include "mixgrad/nn/module.hpp"
#include "mixgrad/optim/optimizer.hpp"
#include "mixgrad/state_dict.hpp"

namespace mixgrad::amp {

/// apex's `loss_scale` property: "dynamic", or a fixed value (`.loss_scale =
/// 128.0` converts).
class LossScale {
 public:
  /// A fixed scale (in [kMinScaleLimit, kMaxScaleLimit], checked by initialize).
  LossScale(double fixed) : value_(fixed) {}  // NOLINT(google-explicit-constructor)
  /// apex's "dynamic".
  static LossScale dynamic() {
    LossScale s(1.0);
    s.dynamic_ = true;
    return s;
  }
  bool is_dynamic() const { return dynamic_; }
  /// The fixed scale; 1 for a dynamic one.
  double value() const { return value_; }
  bool operator==(const LossScale&) const = default;

 private:
  double value_;
  bool dynamic_ = false;
};

/// The arguments of apex's amp.initialize after the models and optimizers.
/// A property left unset takes the opt level's value (see the table above).
struct InitializeOptions {
  /// "O0", "O1", "O2" or "O3".
  std::string opt_level = "O1";
  /// false: nothing is changed and scale_loss passes the loss through.
  bool enabled = true;
  /// The dtype of the models' weights (float16, bfloat16 or float32).
  std::optional<DType> cast_model_type = std::nullopt;
  /// Autocast on while the handle lives (apex's patch_torch_functions).
  std::optional<bool> patch_functions = std::nullopt;
  /// Batch norm's parameters and buffers stay float32 when the model is cast.
  std::optional<bool> keep_batchnorm_fp32 = std::nullopt;
  /// float32 master copies of the optimizers' 16-bit parameters.
  std::optional<bool> master_weights = std::nullopt;
  /// LossScale::dynamic() or a fixed value.
  std::optional<LossScale> loss_scale = std::nullopt;
  /// The dtype every model call casts its floating output to (default
  /// float32 when the model is cast, else none).
  std::optional<DType> cast_model_outputs = std::nullopt;
  /// How many losses get a scaler of their own (scale_loss's loss_id).
  int num_losses = 1;
  /// Floor of a dynamic scale (apex: none; GradScaler's range bounds it).
  std::optional<double> min_loss_scale = std::nullopt;
  /// Ceiling of a dynamic scale (apex's 2^24).
  double max_loss_scale = 0x1p24;
  /// The 16-bit dtype the opt level means (float16 or bfloat16): the models'
  /// under O2 / O3, autocast's under O1. Default: autocast's for the models'
  /// device (bfloat16 on the CPU, float16 on CUDA).
  std::optional<DType> low_prec_dtype = std::nullopt;
};

/// The properties an opt level and the overrides resolve to (apex's
/// `_amp_state.opt_properties`).
struct Properties {
  std::string opt_level;
  bool enabled = true;
  std::optional<DType> cast_model_type = std::nullopt;
  bool patch_functions = false;
  std::optional<bool> keep_batchnorm_fp32 = std::nullopt;
  std::optional<bool> master_weights = std::nullopt;
  LossScale loss_scale = 1.0;
  /// The 16-bit dtype of the opt level (see InitializeOptions).
  DType low_prec_dtype = DType::bfloat16;
};

/// The properties `options` resolve to for models on a device of type
/// `device`, with apex's checks: ValueError for an unknown opt level or an
/// override the level refuses, DTypeError for a dtype out of place.
Properties resolve_properties(const InitializeOptions& options, DeviceType device = DeviceType::cpu);

/// One line per property, as apex prints them.
std::string describe(const Properties& properties);

namespace detail {
struct FrontendState;
}

/// What amp::initialize returns: the live amp state (see the overview).
class [[nodiscard]] Amp {
 public:
  /// What initialize makes (detail::FrontendState is the library's own).
  explicit Amp(std::shared_ptr<detail::FrontendState> state);
  Amp(Amp&& other) noexcept;
  Amp& operator=(Amp&& other) noexcept;
  Amp(const Amp&) = delete;
  Amp& operator=(const Amp&) = delete;
  /// Ends the amp state (see the overview); a moved-from handle does nothing.
  ~Amp();

  const Properties& properties() const;
  int num_losses() const;
  /// The scaler of `loss_id` (ValueError out of range): to read its scale or
  /// install a found-inf hook (distributed::sync_grad_scaler). scale_loss
  /// unscales and updates it; stepping or updating it yourself breaks that.
  GradScaler& loss_scaler(int loss_id);
  const GradScaler& loss_scaler(int loss_id) const;
  /// The current scale of `loss_id` (apex's loss_scaler.loss_scale()):
  /// reads the device, a synchronisation.
  double loss_scale(int loss_id) const;

  /// amp::state_dict() of this state.
  StateDict state_dict() const;
  /// amp::load_state_dict() into this state.
  void load_state_dict(const StateDict& state);

 private:
  void release() noexcept;

  std::shared_ptr<detail::FrontendState> state_;
};

/// apex's amp.initialize: applies the opt level to `models` and
/// `optimizers` (in place) and starts the amp state. Call it once the models
/// are on their device and in float32 and the optimizers are built on their
/// parameters, before the first step. Everything is checked before anything
/// changes: StateError while another handle lives or for an optimizer whose
/// master weights must change after it stepped, ValueError for an unknown
/// opt level, a refused override, num_losses < 1, a model or optimizer
/// listed twice or a scale out of range, DTypeError for a model parameter or
/// buffer that is not float32 (initialize casts it) or a dtype out of place.
Amp initialize(std::vector<std::reference_wrapper<nn::Module>> models,
               std::vector<std::reference_wrapper<optim::Optimizer>> optimizers,
               const InitializeOptions& options = {});
/// One model and one optimizer.
Amp initialize(nn::Module& model, optim::Optimizer& optimizer, const InitializeOptions& options = {});
/// A model alone, for inference (scale_loss then has no optimizer to take).
Amp initialize(nn::Module& model, const InitializeOptions& options = {});

/// apex's amp.state_dict(): each loss scaler's state, as 0-d tensors
/// "loss_scaler<i>.loss_scale" (float64, exact) and
/// "loss_scaler<i>.unskipped" (int64: clean steps towards the next growth;
/// 0 for a fixed scale). No synchronisation. StateError without a live
/// handle.
StateDict state_dict();
/// apex's amp.load_state_dict(): restores a state_dict() with the same
/// number of scalers. Every key and value is checked before any scaler
/// changes (ValueError for missing, unexpected or out-of-range entries,
/// ShapeError / DTypeError for a value of the wrong form). StateError without
/// a live handle.
void load_state_dict(const StateDict& state);

}  // namespace mixgrad::amp
