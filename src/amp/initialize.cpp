#include "mixgrad/amp/initialize.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <utility>

#include "amp/frontend_state.hpp"
#include "core/checks.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::amp {

// ------------------------------------------------------------ the live state

namespace detail {

namespace {

std::mutex& live_mutex() {
  static std::mutex m;
  return m;
}

std::shared_ptr<FrontendState>& live_slot() {
  static std::shared_ptr<FrontendState> slot;
  return slot;
}

}  // namespace

std::shared_ptr<FrontendState> live_state() {
  std::lock_guard lock(live_mutex());
  return live_slot();
}

bool FrontendState::saw(const optim::Optimizer& opt) const {
  for (const Seen& s : optimizers) {
    if (s.optimizer != &opt || s.parameter_ids.size() != opt.parameters().size()) continue;
    bool same = true;
    for (size_t i = 0; i < s.parameter_ids.size() && same; ++i) same = s.parameter_ids[i] == opt.parameters()[i].id();
    if (same) return true;
  }
  return false;
}

void FrontendState::check_loss_id(int loss_id, const char* op) const {
  if (loss_id < 0) throw ValueError(std::string(op) + ": loss_id must be >= 0, got " + std::to_string(loss_id));
  if (static_cast<size_t>(loss_id) >= scalers.size())
    throw ValueError(std::string(op) + ": loss_id " + std::to_string(loss_id) + " is outside [0, " +
                     std::to_string(scalers.size()) + "), the losses initialize was given (num_losses); pass "
                     "num_losses = " + std::to_string(loss_id + 1) + " or more to amp::initialize to use it");
}

void FrontendState::throw_deferred(const char* op) {
  if (!deferred_error) return;
  const std::exception_ptr error = std::exchange(deferred_error, nullptr);
  rethrow_prefixed(error, std::string(op) + ": the end of an earlier scale_loss scope failed in its destructor, "
                                            "which cannot throw (call finish() to get such errors where they "
                                            "happen; its gradients were put back as before the scope): ");
}

void rethrow_prefixed(const std::exception_ptr& error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const ShapeError& e) {
    throw ShapeError(prefix + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(prefix + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(prefix + e.what());
  } catch (const StateError& e) {
    throw StateError(prefix + e.what());
  } catch (const ValueError& e) {
    throw ValueError(prefix + e.what());
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(prefix + e.what());
  } catch (const IOError& e) {
    throw IOError(prefix + e.what());
  } catch (const Error& e) {
    throw Error(prefix + e.what());
  }
  // Anything that is not a mixgrad error propagates as it is.
}

}  // namespace detail

// ------------------------------------------------------ the property table

namespace {

constexpr const char* kInit = "amp::initialize";
constexpr double kApexInitScale = 0x1p16;
constexpr int64_t kApexGrowthInterval = 2000;

bool is_16bit(DType d) { return d == DType::float16 || d == DType::bfloat16; }

std::string name(DType d) { return std::string(to_string(d)); }

// apex's O0-O3: the defaults of each level.
Properties level_defaults(const std::string& level, DType low) {
  Properties p;
  p.opt_level = level;
  p.low_prec_dtype = low;
  if (level == "O0") {
    p.cast_model_type = DType::float32;
    p.master_weights = false;
  } else if (level == "O1") {
    p.patch_functions = true;
    p.loss_scale = LossScale::dynamic();
  } else if (level == "O2") {
    p.cast_model_type = low;
    p.keep_batchnorm_fp32 = true;
    p.master_weights = true;
    p.loss_scale = LossScale::dynamic();
  } else if (level == "O3") {
    p.cast_model_type = low;
    p.keep_batchnorm_fp32 = false;
    p.master_weights = false;
  } else {
    throw ValueError(std::string(kInit) + ": unknown opt_level '" + level +
                     "'; the levels are \"O0\" (float32), \"O1\" (autocast), \"O2\" (16-bit weights, float32 "
                     "master weights and batch norm) and \"O3\" (pure 16-bit)");
  }
  return p;
}

// apex's overrides, with its refusals: O1 casts around functions, not the
// weights, so it takes no model dtype but float32, no batch-norm setting and
// no master weights; only O1 patches functions.
void apply_overrides(Properties& p, const InitializeOptions& o) {
  const bool o1 = p.opt_level == "O1";
  const std::string why = std::string(kInit) + ": opt_level \"" + p.opt_level + "\" ";
  if (o.cast_model_type) {
    if (o1 && *o.cast_model_type != DType::float32)
      throw ValueError(why + "casts around the ops and keeps the model's weights float32, so cast_model_type "
                             "must be unset or float32, got " + name(*o.cast_model_type) +
                       "; use opt_level \"O2\" or \"O3\" for 16-bit weights");
    p.cast_model_type = o.cast_model_type;
  }
  if (o.patch_functions) {
    if (!o1 && *o.patch_functions)
      throw ValueError(why + "does not take patch_functions = true: only opt_level \"O1\" runs under autocast");
    p.patch_functions = *o.patch_functions;
  }
  if (o.keep_batchnorm_fp32) {
    if (o1)
      throw ValueError(why + "runs batch norm in float32 already, so keep_batchnorm_fp32 must be left unset");
    p.keep_batchnorm_fp32 = o.keep_batchnorm_fp32;
  }
  if (o.master_weights) {
    if (o1)
      throw ValueError(why + "keeps the weights float32, so master_weights must be left unset; use opt_level "
                             "\"O2\" for 16-bit weights with float32 master weights");
    p.master_weights = o.master_weights;
  }
  if (o.loss_scale) p.loss_scale = *o.loss_scale;
}

}  // namespace

Properties resolve_properties(const InitializeOptions& options, DeviceType device) {
  if (options.low_prec_dtype && !is_16bit(*options.low_prec_dtype))
    throw DTypeError(std::string(kInit) + ": low_prec_dtype must be float16 or bfloat16, got " +
                     name(*options.low_prec_dtype));
  if (options.cast_model_type && !is_16bit(*options.cast_model_type) && *options.cast_model_type != DType::float32)
    throw DTypeError(std::string(kInit) + ": cast_model_type must be float16, bfloat16 or float32, got " +
                     name(*options.cast_model_type));
  if (options.cast_model_outputs && !is_floating_point(*options.cast_model_outputs))
    throw DTypeError(std::string(kInit) + ": cast_model_outputs must be a floating dtype, got " +
                     name(*options.cast_model_outputs));
  Properties p = level_defaults(options.opt_level, options.low_prec_dtype.value_or(autocast_dtype(device)));
  apply_overrides(p, options);
  p.enabled = options.enabled;
  return p;
}

std::string describe(const Properties& p) {
  const auto opt_dtype = [](const std::optional<DType>& d) { return d ? name(*d) : std::string("None"); };
  const auto opt_bool = [](const std::optional<bool>& b) { return b ? (*b ? "True" : "False") : "None"; };
  const std::string scale =
      p.loss_scale.is_dynamic() ? std::string("dynamic") : std::to_string(p.loss_scale.value());
  return "enabled                : " + std::string(p.enabled ? "True" : "False") +
         "\nopt_level              : " + p.opt_level +
         "\ncast_model_type        : " + opt_dtype(p.cast_model_type) +
         "\npatch_functions        : " + (p.patch_functions ? "True" : "False") +
         "\nkeep_batchnorm_fp32    : " + opt_bool(p.keep_batchnorm_fp32) +
         "\nmaster_weights         : " + opt_bool(p.master_weights) +
         "\nloss_scale             : " + scale +
         "\nlow_prec_dtype         : " + name(p.low_prec_dtype) + "\n";
}

// ------------------------------------------------------------- initialize

namespace {

using Models = std::vector<std::reference_wrapper<nn::Module>>;
using OptimizerList = std::vector<std::reference_wrapper<optim::Optimizer>>;

template <class T>
void check_listed_once(const std::vector<std::reference_wrapper<T>>& list, const char* what) {
  std::set<const T*> seen;
  for (size_t i = 0; i < list.size(); ++i)
    if (!seen.insert(&list[i].get()).second)
      throw ValueError(std::string(kInit) + ": " + what + " " + std::to_string(i) + " is listed twice");
}

// apex's check_params_fp32: the models come in float32, and initialize casts them.
void check_models(const Models& models) {
  check_listed_once(models, "model");
  for (size_t i = 0; i < models.size(); ++i) {
    std::vector<nn::NamedTensor> tensors = models[i].get().named_parameters();
    for (auto& b : models[i].get().named_buffers()) tensors.push_back(std::move(b));
    for (const auto& [key, t] : tensors)
      if (is_floating_point(t.dtype()) && t.dtype() != DType::float32)
        throw DTypeError(std::string(kInit) + ": model " + std::to_string(i) + "'s '" + key + "' is " +
                         core::describe(t) + "; pass the models in float32 (do not cast them yourself): "
                         "initialize casts them as the opt level says");
  }
}

// The device type the models' tensors are on: it picks the default 16-bit dtype.
DeviceType models_device(const Models& models, const InitializeOptions& options) {
  std::set<DeviceType> types;
  for (const nn::Module& m : models)
    for (const Tensor& t : m.parameters()) types.insert(t.device().type());
  if (types.size() > 1 && !options.low_prec_dtype)
    throw ValueError(std::string(kInit) + ": the models are on CPU and CUDA devices, whose default 16-bit "
                                          "dtypes differ; name one with .low_prec_dtype");
  return types.empty() ? DeviceType::cpu : *types.begin();
}

GradScalerOptions scaler_options(const Properties& p, const InitializeOptions& o) {
  if (p.loss_scale.is_dynamic())
    return {.init_scale = std::min(o.max_loss_scale, kApexInitScale),
            .growth_factor = 2.0,
            .backoff_factor = 0.5,
            .growth_interval = kApexGrowthInterval,
            .min_scale = o.min_loss_scale,
            .max_scale = o.max_loss_scale,
            .enabled = p.enabled};
  return {.init_scale = p.loss_scale.value(),
          .growth_factor = 2.0,
          .backoff_factor = 0.5,
          .growth_interval = 0,
          .min_scale = std::nullopt,
          .max_scale = std::nullopt,
          .enabled = p.enabled};
}

// Everything that can refuse, before anything changes: the state to commit.
std::shared_ptr<detail::FrontendState> checked_state(const Models& models, const OptimizerList& optimizers,
                                                     const InitializeOptions& options) {
  if (detail::live_state())
    throw StateError(std::string(kInit) + ": amp is initialized already (an amp::Amp handle is alive); as in "
                                          "apex, pass every model and optimizer to one initialize, or let the "
                                          "first handle go before initializing again");
  if (!autodiff::detail::recording_managers().empty())
    throw StateError(std::string(kInit) + ": called while a GradManager records; call it before training");
  auto state = std::make_shared<detail::FrontendState>();
  state->properties = resolve_properties(options, models_device(models, options));
  const Properties& p = state->properties;
  if (options.num_losses < 1)
    throw ValueError(std::string(kInit) + ": num_losses must be >= 1, got " + std::to_string(options.num_losses));
  check_listed_once(optimizers, "optimizer");
  if (p.enabled) {
    check_models(models);
    if (p.master_weights)
      for (const optim::Optimizer& opt : optimizers) opt.check_set_master_weights(*p.master_weights);
  }
  try {
    for (int i = 0; i < options.num_losses; ++i) state->scalers.emplace_back(scaler_options(p, options));
  } catch (const ValueError& e) {
    throw ValueError(std::string(kInit) + ": the loss scale settings: " + e.what());
  }
  state->fixed_scales.assign(state->scalers.size(), p.loss_scale.value());
  for (const nn::Module& m : models) state->models.push_back(&m);
  for (const optim::Optimizer& opt : optimizers) {
    detail::FrontendState::Seen seen{.optimizer = &opt, .parameter_ids = {}};
    for (const Tensor& t : opt.parameters()) seen.parameter_ids.push_back(t.id());
    state->optimizers.push_back(std::move(seen));
  }
  return state;
}

// apex's cast of the models and its patched forward.
void apply_to_models(const Models& models, const Properties& p, const InitializeOptions& o) {
  for (nn::Module& m : models) {
    if (p.cast_model_type) {
      m.to(*p.cast_model_type, {.keep_batch_norm_fp32 = p.keep_batchnorm_fp32.value_or(false)});
      m.set_call_casts({.input = p.cast_model_type, .output = o.cast_model_outputs.value_or(DType::float32)});
    } else if (o.cast_model_outputs) {
      m.set_call_casts({.input = std::nullopt, .output = o.cast_model_outputs});
    }
  }
}

// patch_functions: autocast on for the process, as apex patches torch's functions.
void patch_functions(detail::FrontendState& s, const InitializeOptions& o) {
  s.set_autocast = true;
  s.saved_enabled = amp::enabled.load();
  if (o.low_prec_dtype) {
    s.set_low_prec_dtype = true;
    s.saved_low_prec_was_set = amp::low_prec_dtype.is_set();
    s.saved_low_prec_dtype = amp::low_prec_dtype.load();
    amp::low_prec_dtype = *o.low_prec_dtype;
  }
  amp::enabled = true;
}

void unpatch_functions(detail::FrontendState& s) noexcept {
  if (!s.set_autocast) return;
  amp::enabled = s.saved_enabled;
  if (s.set_low_prec_dtype) {
    if (s.saved_low_prec_was_set)
      amp::low_prec_dtype = s.saved_low_prec_dtype;  // a float16 / bfloat16 it held: cannot throw
    else
      amp::low_prec_dtype.reset();
  }
  s.set_autocast = false;
}

}  // namespace

Amp initialize(std::vector<std::reference_wrapper<nn::Module>> models,
               std::vector<std::reference_wrapper<optim::Optimizer>> optimizers, const InitializeOptions& options) {
  std::shared_ptr<detail::FrontendState> state = checked_state(models, optimizers, options);
  const Properties& p = state->properties;
  if (p.enabled) {
    apply_to_models(models, p, options);
    if (p.master_weights)
      for (optim::Optimizer& opt : optimizers) opt.set_master_weights(*p.master_weights);
    if (p.patch_functions) patch_functions(*state, options);
  }
  {
    std::lock_guard lock(detail::live_mutex());
    if (detail::live_slot()) {  // another thread initialized meanwhile
      unpatch_functions(*state);
      throw StateError(std::string(kInit) + ": amp was initialized by another thread meanwhile");
    }
    detail::live_slot() = state;
  }
  return Amp(std::move(state));
}

Amp initialize(nn::Module& model, optim::Optimizer& optimizer, const InitializeOptions& options) {
  return initialize(Models{model}, OptimizerList{optimizer}, options);
}

Amp initialize(nn::Module& model, const InitializeOptions& options) {
  return initialize(Models{model}, OptimizerList{}, options);
}

// ------------------------------------------------------------ the handle

Amp::Amp(std::shared_ptr<detail::FrontendState> state) : state_(std::move(state)) {}

Amp::Amp(Amp&& other) noexcept : state_(std::move(other.state_)) {}

Amp& Amp::operator=(Amp&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
  }
  return *this;
}

Amp::~Amp() { release(); }

void Amp::release() noexcept {
  if (!state_) return;
  {
    std::lock_guard lock(detail::live_mutex());
    if (detail::live_slot() == state_) detail::live_slot().reset();
  }
  unpatch_functions(*state_);  // scopes still open keep the state: they can end
  state_.reset();
}

namespace {

detail::FrontendState& checked(const std::shared_ptr<detail::FrontendState>& state, const char* op) {
  if (!state) throw StateError(std::string(op) + ": this amp::Amp handle was moved from");
  return *state;
}

}  // namespace

const Properties& Amp::properties() const { return checked(state_, "amp::Amp::properties").properties; }

int Amp::num_losses() const { return static_cast<int>(checked(state_, "amp::Amp::num_losses").scalers.size()); }

GradScaler& Amp::loss_scaler(int loss_id) {
  detail::FrontendState& s = checked(state_, "amp::Amp::loss_scaler");
  s.check_loss_id(loss_id, "amp::Amp::loss_scaler");
  return s.scalers[static_cast<size_t>(loss_id)];
}

const GradScaler& Amp::loss_scaler(int loss_id) const { return const_cast<Amp*>(this)->loss_scaler(loss_id); }

double Amp::loss_scale(int loss_id) const { return loss_scaler(loss_id).scale_factor(); }

// ------------------------------------------------------ state dict

namespace {

constexpr const char* kLossScale = "loss_scale";
constexpr const char* kUnskipped = "unskipped";

std::string scaler_key(size_t i, const char* what) { return "loss_scaler" + std::to_string(i) + "." + what; }

StateDict state_dict_of(detail::FrontendState& s, const char* op) {
  s.throw_deferred(op);
  StateDict out;
  for (size_t i = 0; i < s.scalers.size(); ++i) {
    const StateDict sd = s.scalers[i].state_dict();
    out.insert(scaler_key(i, kLossScale), sd.at("scale_factor"));
    out.insert(scaler_key(i, kUnskipped), sd.at("_growth_tracker"));
  }
  return out;
}

// Each scaler's full GradScaler dict with the loaded values, every one checked.
std::vector<StateDict> checked_loads(const detail::FrontendState& s, const StateDict& state, const char* op) {
  const std::string where = std::string(op) + ": ";
  const std::string count = "this amp state has " + std::to_string(s.scalers.size()) +
                            " loss scaler(s) (num_losses = " + std::to_string(s.scalers.size()) + ")";
  std::set<std::string> expected;
  for (size_t i = 0; i < s.scalers.size(); ++i) expected.insert({scaler_key(i, kLossScale), scaler_key(i, kUnskipped)});
  for (const auto& [key, t] : state)
    if (!expected.contains(key))
      throw ValueError(where + "unexpected key '" + key + "'; " + count + "; nothing was loaded");
  std::vector<StateDict> loads;
  for (size_t i = 0; i < s.scalers.size(); ++i) {
    StateDict full = s.scalers[i].state_dict();
    for (const auto& [ours, theirs] :
         {std::pair{"scale_factor", kLossScale}, std::pair{"_growth_tracker", kUnskipped}}) {
      const Tensor* t = state.find(scaler_key(i, theirs));
      if (!t)
        throw ValueError(where + "missing key '" + scaler_key(i, theirs) + "'; " + count + "; nothing was loaded");
      full.insert_or_assign(ours, *t);
    }
    try {
      s.scalers[i].check_state_dict(full);
    } catch (const Error&) {
      detail::rethrow_prefixed(std::current_exception(),
                               where + "loss_scaler" + std::to_string(i) + " (nothing was loaded): ");
    }
    loads.push_back(std::move(full));
  }
  return loads;
}

void load_state_dict_into(detail::FrontendState& s, const StateDict& state, const char* op) {
  s.throw_deferred(op);
  std::vector<StateDict> loads = checked_loads(s, state, op);
  for (size_t i = 0; i < loads.size(); ++i) {
    s.scalers[i].load_state_dict(loads[i]);
    s.fixed_scales[i] = loads[i].at("scale_factor").item<double>();
  }
}

std::shared_ptr<detail::FrontendState> live_or_throw(const char* op) {
  std::shared_ptr<detail::FrontendState> s = detail::live_state();
  if (!s)
    throw StateError(std::string(op) + ": amp is not initialized; call mg::amp::initialize(models, optimizers, "
                                       "{.opt_level = ...}) first and keep the handle it returns alive");
  return s;
}

}  // namespace

StateDict Amp::state_dict() const {
  return state_dict_of(checked(state_, "amp::Amp::state_dict"), "amp::Amp::state_dict");
}

void Amp::load_state_dict(const StateDict& state) {
  load_state_dict_into(checked(state_, "amp::Amp::load_state_dict"), state, "amp::Amp::load_state_dict");
}

StateDict state_dict() { return state_dict_of(*live_or_throw("amp::state_dict"), "amp::state_dict"); }

void load_state_dict(const StateDict& state) {
  load_state_dict_into(*live_or_throw("amp::load_state_dict"), state, "amp::load_state_dict");
}

}  // namespace mixgrad::amp
