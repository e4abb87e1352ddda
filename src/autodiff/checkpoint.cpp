#include "mixgrad/autodiff/checkpoint.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_set>
#include <utility>

#include "autodiff/dtr_pool.hpp"
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
// A DTR segment's first run uses the same isolation, without counting as a
// recomputation (`recomputing` false).
class RecomputeScope {
 public:
  explicit RecomputeScope(bool isolate, bool recomputing = true)
      : list_(detail::recording_managers()),
        saved_list_(list_),
        saved_paused_(detail::recording_paused()),
        recomputing_(recomputing) {
    if (isolate) {
      list_.clear();
      detail::recording_paused() = 0;
    }
    if (recomputing_) ++g_recomputing;
  }
  ~RecomputeScope() {
    if (recomputing_) --g_recomputing;
    list_ = std::move(saved_list_);
    detail::recording_paused() = saved_paused_;
  }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  std::vector<GradManager*>& list_;
  std::vector<GradManager*> saved_list_;
  int saved_paused_;
  bool recomputing_;
};

// A DTR segment's graph: fn's ops as a GradManager of the segment's own
// recorded them in its first run, kept until the backward or an eviction.
// Evicted in parts (dtr::detail::Evictable): part 0 is the graph, the
// others (1 + i) the results of the products `kept` holds (entry i), which
// the recomputation reuses until they are dropped too.
class KeptGraph : public dtr::detail::Evictable {
 public:
  std::unique_ptr<GradManager> manager = std::make_unique<GradManager>();
  std::optional<RecordingScope> recording;
  std::vector<Tensor> outputs;  // fn's, on the kept tape
  std::vector<Tensor> grads;    // of the inputs and parameters, caught by the manager's callbacks
  detail::KeptResults* kept = nullptr;  // the node's kept results (it outlives this)
  int64_t evicted_bytes = 0;            // what a recomputation needs again

  bool evicted() const { return manager == nullptr; }

  std::vector<dtr::detail::Part> parts() const override {
    if (!evicted()) {
      int64_t bytes = this->bytes;
      double seconds = cost_seconds;
      for (size_t i = 0; kept && i < kept->entries.size(); ++i)
        if (const auto& e = kept->entries[i]; !e.dropped && !holds_an_output(e)) {
          bytes -= result_bytes(e, false);
          seconds -= e.seconds;
        }
      return {{.index = 0, .bytes = bytes, .cost_seconds = std::max(seconds, 0.0), .graph = true}};
    }
    std::vector<dtr::detail::Part> out;
    for (size_t i = 0; kept && i < kept->entries.size(); ++i) {
      const auto& e = kept->entries[i];
      if (const int64_t b = e.dropped ? 0 : result_bytes(e, true); b > 0)
        out.push_back({.index = 1 + i, .bytes = b, .cost_seconds = e.seconds, .graph = false});
    }
    return out;
  }

  void evict(const dtr::detail::Part& part) override {
    evicted_bytes += part.bytes;
    if (part.index > 0) return kept->drop(part.index - 1);
    recording.reset();  // drops the tape and what its ops saved
    manager.reset();
    outputs.clear();
  }

  // Drops the results nothing else holds (they would have been freed
  // without DTR), after the first run.
  void drop_unshared() {
    for (size_t i = 0; kept && i < kept->entries.size(); ++i)
      if (!kept->entries[i].dropped && result_bytes(kept->entries[i], true) > 0) kept->drop(i);
  }

  // An entry's results' bytes: all of them, or (`alone`) those nothing but
  // the entry holds (what dropping it frees).
  static int64_t result_bytes(const detail::KeptResults::Entry& e, bool alone) {
    int64_t n = 0;
    for (const Tensor& t : e.results)
      if (t.defined() && (!alone || (t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1)))
        n += t.impl()->storage->nbytes();
    return n;
  }

 private:
  // Whether one of the entry's results shares memory with an output (the
  // bytes held exclude the outputs: not counted twice).
  bool holds_an_output(const detail::KeptResults::Entry& e) const {
    for (const Tensor& t : e.results)
      for (const Tensor& y : outputs)
        if (t.defined() && y.defined() && t.impl()->storage == y.impl()->storage) return true;
    return false;
  }
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
  // `segment`: a DTR segment, which keeps its graph until DTR evicts it.
  Checkpointed(CheckpointFn fn, std::vector<bool> input_needs, CheckpointOptions options, bool segment = false)
      : fn_(std::move(fn)),
        inputs_(input_needs.size()),
        needs_(std::move(input_needs)),
        options_(std::move(options)),
        segment_(segment) {
    // A DTR segment evicted in parts keeps its products' results (as long
    // as its graph holds them anyway: KeptGraph::drop_unshared).
    const std::vector<std::string> keep = segment_ ? kept_products() : options_.keep;
    if (!keep.empty()) {
      kept_.emplace();
      kept_->name = options_.name;
      kept_->ops = detail::keepable_ops(keep, options_.name);
      kept_->keep_if = options_.keep_if;
    }
  }

  std::string name() const override {
    return (segment_ ? "dtr::segment '" : "autodiff::checkpoint '") + options_.name + "'";
  }

  // all = the inputs, then the tracked tensors fn may use.
  std::vector<Tensor> forward(const std::vector<Tensor>& all) override {
    saved_ = all;
    if (options_.preserve_rng_state) rng_ = random_state::get();
    std::optional<detail::KeptResultsScope> keeping;
    if (kept_) keeping.emplace(*kept_, detail::KeptResultsScope::Mode::keep);
    std::vector<Tensor> outputs =
        segment_ ? forward_kept(all) : fn_(std::vector<Tensor>(all.begin(), all.begin() + static_cast<long>(inputs_)));
    for (const Tensor& y : outputs) {
      if (!y.defined()) throw ValueError(name() + ": the function returned an undefined tensor");
      shapes_.push_back(y.shape());
      dtypes_.push_back(y.dtype());
    }
    if (graph_) dtr::detail::track(graph_);  // ValueError for a segment above the threshold by itself
    return outputs;
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& output_grads) override {
    // A recorded backward (apply's closure asked for it and the walk records):
    // the recomputation is recorded on the walk's managers as well.
    const bool recorded = is_recording();
    // Room to recompute what was evicted, and for the backward's working set
    // (the gradients of the segment's intermediates: about a quarter of it),
    // made by evicting others: this one is about to be used.
    if (segment_ && graph_) {
      graph_->pinned = true;
      dtr::detail::make_room(graph_->device, graph_->evicted_bytes + graph_->bytes / 4);
    }
    if (graph_ && !graph_->evicted() && !recorded) return backward_kept(output_grads);
    graph_.reset();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> grads = backward_recomputed(output_grads, recorded);
    if (segment_)
      dtr::detail::recomputed(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                              device_of(saved_));
    return grads;
  }

 private:
  static Device device_of(const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts)
      if (t.defined()) return t.device();
    return Device::cpu();
  }

  // The leaves a GradManager of the node's own differentiates fn at: the
  // inputs that need a gradient (as new leaves when `detach`), and the
  // parameters fn may use. Their gradients are caught in `grads`, not
  // written to .grad().
  std::vector<Tensor> attach_leaves(GradManager& gm, std::vector<Tensor>& grads, bool detach) const {
    std::vector<Tensor> leaves(saved_.begin(), saved_.begin() + static_cast<long>(inputs_));
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (!saved_[i].defined() || !is_floating_point(saved_[i].dtype()) || (i < inputs_ && !needs_[i])) continue;
      Tensor leaf = i < inputs_ && detach ? saved_[i].detach() : saved_[i];
      if (i < inputs_) leaves[i] = leaf;
      gm.attach(leaf, {[&grads, i](const Tensor&, const Tensor& g) {
                  grads[i] = g;
                  return Tensor();
                }});
    }
    return leaves;
  }

  // A DTR segment's first run: fn recorded by a GradManager of its own,
  // isolated from the managers recording around it, whose tape is kept.
  std::vector<Tensor> forward_kept(const std::vector<Tensor>& all) {
    auto g = std::make_shared<KeptGraph>();
    g->name = options_.name;
    g->device = device_of(all);
    g->grads.assign(all.size(), Tensor());
    const std::vector<Tensor> leaves = attach_leaves(*g->manager, g->grads, true);
    dtr::detail::make_room(g->device, dtr::detail::last_segment_bytes());  // layers alike: the last one's size
    const int64_t before = dtr::detail::allocated_on(g->device);
    const auto t0 = std::chrono::steady_clock::now();
    {
      RecomputeScope isolated(true, false);
      dtr::detail::RunningSegment running(*g);
      g->recording.emplace(g->manager->record());
      g->outputs = fn_(leaves);
    }
    g->ran = std::chrono::steady_clock::now();
    g->cost_seconds = std::chrono::duration<double>(g->ran - t0).count();
    g->kept = kept_ ? &*kept_ : nullptr;
    g->drop_unshared();
    int64_t held = dtr::detail::allocated_on(g->device) - before;
    for (const Tensor& y : g->outputs)
      if (y.defined()) held -= y.numel() * element_size(y.dtype());  // the outputs live on without the segment
    g->bytes = std::max<int64_t>(held, 0);
    graph_ = g;
    return g->outputs;
  }

  // A kept segment's backward: the kept tape's, with no recomputation.
  std::vector<Tensor> backward_kept(const std::vector<Tensor>& output_grads) {
    std::shared_ptr<KeptGraph> g = std::move(graph_);
    if (kept_) kept_->entries.clear();  // the graph holds what its backward needs, and frees it as it goes
    std::vector<Tensor> ys, dys;
    for (size_t j = 0; j < g->outputs.size(); ++j)
      if (is_floating_point(g->outputs[j].dtype()) && output_grads[j].defined()) {
        ys.push_back(g->outputs[j]);
        dys.push_back(output_grads[j]);
      }
    RecomputeScope isolated(true, false);
    if (!ys.empty()) g->manager->backward(ys, dys);
    return std::move(g->grads);
  }

  std::vector<Tensor> backward_recomputed(const std::vector<Tensor>& output_grads, bool recorded) {
    std::vector<Tensor> grads(saved_.size());
    GradManager local;
    // Plainly, the inputs are taken as new leaves; recorded, as themselves,
    // so the recomputation hangs off their history.
    const std::vector<Tensor> leaves = attach_leaves(local, grads, !recorded);
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
  bool segment_ = false;
  std::shared_ptr<KeptGraph> graph_;  // a DTR segment's, until its backward or eviction
};

// fn(inputs) as one node on the tape (recording): a checkpoint, or a DTR segment.
std::vector<Tensor> run_checkpointed(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                                     const CheckpointOptions& options, bool segment) {
  std::vector<bool> needs;
  for (const Tensor& t : inputs) {
    bool tracked = false;
    for (GradManager* gm : detail::recording_managers()) tracked = tracked || (t.defined() && detail::tracks(gm, t.id()));
    needs.push_back(tracked);
  }
  std::vector<Tensor> all = inputs;
  for (Tensor& t : tracked_tensors(inputs)) all.push_back(std::move(t));
  return autodiff::apply(std::make_shared<Checkpointed>(fn, std::move(needs), options, segment), all);
}

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  if (!fn) throw ValueError("autodiff::checkpoint '" + options.name + "': empty function");
  if (!options.keep.empty()) (void)detail::keepable_ops(options.keep, options.name);  // ValueError before fn runs
  // Not recording (no_grad, inference, or the forward of an enclosing
  // checkpoint): nothing to save, fn runs as it is.
  if (!is_recording()) return fn(inputs);
  return run_checkpointed(fn, inputs, options, false);
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

namespace mixgrad::dtr {

std::vector<Tensor> segment(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                            const std::vector<Tensor>& inputs, const std::string& name) {
  if (!fn) throw ValueError("dtr::segment '" + name + "': empty function");
  if (!detail::active() || !autodiff::is_recording()) return fn(inputs);
  return autodiff::run_checkpointed(fn, inputs, {.name = name}, true);
}

Tensor segment(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, const std::string& name) {
  if (!fn) throw ValueError("dtr::segment '" + name + "': empty function");
  // fn is copied: an evicted segment's backward calls it again, after this returns.
  return segment([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                 std::vector<Tensor>{input}, name)[0];
}

}  // namespace mixgrad::dtr
