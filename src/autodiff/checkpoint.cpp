#include "mixgrad/autodiff/checkpoint.hpp"

#include <unordered_set>
#include <utility>

#include "autodiff/frozen.hpp"
#include "autodiff/selective.hpp"
#include "core/random_state.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/autodiff/function.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"

namespace mixgrad::autodiff {

namespace {

thread_local int g_recomputing = 0;

// While a checkpoint recomputes inside a plain backward: this thread's
// recording list is emptied and recording unpaused (the walk around it
// paused it), so the recomputation goes to the checkpoint's own manager and
// to no other. In a recorded backward (create_graph, nested managers) the
// list is left as it is: the managers recording the backward record the
// recomputation and its backward too, which makes them differentiable.
// Everything is restored at the end.
class RecomputeScope {
 public:
  explicit RecomputeScope(bool isolate)
      : list_(detail::recording_managers()), saved_list_(list_), saved_paused_(detail::recording_paused()) {
    if (isolate) {
      list_.clear();
      detail::recording_paused() = 0;
    }
    ++g_recomputing;
  }
  ~RecomputeScope() {
    --g_recomputing;
    list_ = std::move(saved_list_);
    detail::recording_paused() = saved_paused_;
  }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  std::vector<GradManager*>& list_;
  std::vector<GradManager*> saved_list_;
  int saved_paused_;
};

// Sets the global generator to `state` for a scope, then back.
class RngScope {
 public:
  explicit RngScope(const std::optional<random_state::State>& state) {
    if (!state) return;
    saved_ = random_state::get();
    random_state::set(*state);
  }
  ~RngScope() {
    if (saved_) random_state::set(*saved_);
  }
  RngScope(const RngScope&) = delete;
  RngScope& operator=(const RngScope&) = delete;

 private:
  std::optional<random_state::State> saved_;
};

// The tensors a recording manager on this thread tracks and `inputs` does not
// hold: the parameters fn may use, which get gradients through the checkpoint.
std::vector<Tensor> tracked_tensors(const std::vector<Tensor>& inputs) {
  std::unordered_set<uint64_t> seen;
  for (const Tensor& t : inputs)
    if (t.defined()) seen.insert(t.id());
  std::vector<Tensor> out;
  for (GradManager* gm : detail::recording_managers())
    for (const Tensor& t : gm->attached_tensors())
      if (detail::tracks(gm, t.id()) && seen.insert(t.id()).second) out.push_back(t);
  return out;
}

class Checkpointed : public Function {
 public:
  Checkpointed(CheckpointFn fn, std::vector<bool> input_needs, CheckpointOptions options)
      : fn_(std::move(fn)), inputs_(input_needs.size()), needs_(std::move(input_needs)), options_(std::move(options)) {
    if (!options_.keep.empty())
      kept_ = detail::KeptResults{options_.name, detail::keepable_ops(options_.keep, options_.name), options_.keep_if};
  }

  std::string name() const override { return "autodiff::checkpoint '" + options_.name + "'"; }

  // all = the inputs, then the tracked tensors fn may use.
  std::vector<Tensor> forward(const std::vector<Tensor>& all) override {
    saved_ = all;
    if (options_.preserve_rng_state) rng_ = random_state::get();
    std::optional<detail::KeptResultsScope> keeping;
    if (kept_) keeping.emplace(*kept_, detail::KeptResultsScope::Mode::keep);
    std::vector<Tensor> outputs = fn_(std::vector<Tensor>(all.begin(), all.begin() + static_cast<long>(inputs_)));
    for (const Tensor& y : outputs) {
      if (!y.defined()) throw ValueError(name() + ": the function returned an undefined tensor");
      shapes_.push_back(y.shape());
      dtypes_.push_back(y.dtype());
    }
    return outputs;
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& output_grads) override {
    // A recorded backward (apply's closure asked for it and the walk records):
    // the recomputation is recorded on the walk's managers as well.
    const bool recorded = is_recording();
    std::vector<Tensor> grads(saved_.size());
    std::vector<Tensor> leaves(saved_.begin(), saved_.begin() + static_cast<long>(inputs_));
    GradManager local;
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (!saved_[i].defined() || !is_floating_point(saved_[i].dtype()) || (i < inputs_ && !needs_[i])) continue;
      // Plainly, the inputs are taken as new leaves; recorded, as themselves,
      // so the recomputation hangs off their history. The parameters are
      // themselves; their gradients are caught here and returned, not
      // written to .grad().
      Tensor leaf = i < inputs_ && !recorded ? saved_[i].detach() : saved_[i];
      if (i < inputs_) leaves[i] = leaf;
      local.attach(leaf, {[&grads, i](const Tensor&, const Tensor& g) {
                     grads[i] = g;
                     return Tensor();
                   }});
    }
    RecomputeScope scope(!recorded);
    RngScope same_draws(rng_);
    auto recording = local.record();
    const std::vector<Tensor> outputs = recompute(leaves);
    check_recomputed(outputs);
    std::vector<Tensor> ys, dys;
    for (size_t j = 0; j < outputs.size(); ++j)
      if (is_floating_point(outputs[j].dtype()) && output_grads[j].defined()) {
        ys.push_back(outputs[j]);
        dys.push_back(output_grads[j]);
      }
    if (!ys.empty()) local.backward(ys, dys);
    return grads;
  }

 private:
  // fn again, handed back the results the first run kept (the first time:
  // a second backward through a kept graph recomputes everything).
  std::vector<Tensor> recompute(const std::vector<Tensor>& leaves) {
    if (!kept_ || kept_->next > 0 || kept_->entries.empty()) return fn_(leaves);
    std::vector<Tensor> outputs;
    {
      detail::KeptResultsScope reusing(*kept_, detail::KeptResultsScope::Mode::reuse);
      outputs = fn_(leaves);
    }
    const size_t ran = kept_->next, had = kept_->entries.size();
    kept_->entries.clear();  // handed back or stale: the recomputed graph holds what it still needs
    kept_->next = had;
    if (ran != had)
      throw StateError(name() + ": the recomputation in the backward ran " + std::to_string(ran) +
                       " of the first run's " + std::to_string(had) +
                       " kept ops; the function must compute the same thing again");
    return outputs;
  }

  void check_recomputed(const std::vector<Tensor>& outputs) const {
    bool same = outputs.size() == shapes_.size();
    for (size_t j = 0; same && j < outputs.size(); ++j)
      same = outputs[j].defined() && outputs[j].shape() == shapes_[j] && outputs[j].dtype() == dtypes_[j];
    if (!same)
      throw StateError(name() + ": the recomputation in the backward gave other outputs (count, shapes or dtypes) "
                                "than the forward; the function must compute the same thing again (does it read "
                                "state that changed since the forward?)");
  }

  CheckpointFn fn_;
  size_t inputs_;
  std::vector<bool> needs_;  // of the inputs: tracked by a recording manager at the call
  CheckpointOptions options_;
  std::vector<Tensor> saved_;
  std::optional<random_state::State> rng_;
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
  std::optional<detail::KeptResults> kept_;  // selective checkpointing's kept results
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  if (!fn) throw ValueError("autodiff::checkpoint '" + options.name + "': empty function");
  if (!options.keep.empty()) (void)detail::keepable_ops(options.keep, options.name);  // ValueError before fn runs
  // Not recording (no_grad, inference, or the forward of an enclosing
  // checkpoint): nothing to save, fn runs as it is.
  if (!is_recording()) return fn(inputs);
  std::vector<bool> needs;
  for (const Tensor& t : inputs) {
    bool tracked = false;
    for (GradManager* gm : detail::recording_managers()) tracked = tracked || (t.defined() && detail::tracks(gm, t.id()));
    needs.push_back(tracked);
  }
  std::vector<Tensor> all = inputs;
  for (Tensor& t : tracked_tensors(inputs)) all.push_back(std::move(t));
  return autodiff::apply(std::make_shared<Checkpointed>(fn, std::move(needs), options), all);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const CheckpointOptions& options) {
  if (!fn) throw ValueError("autodiff::checkpoint '" + options.name + "': empty function");
  // fn is copied: the backward calls it again, after this returns.
  return checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                    std::vector<Tensor>{input}, options)[0];
}

bool is_recomputing() { return g_recomputing > 0; }

std::vector<std::string> kept_products() {
  return {"matmul", "linear", "conv1d", "conv2d", "conv_transpose2d", "scaled_dot_product_attention"};
}

}  // namespace mixgrad::autodiff
