#include "mixgrad/autodiff/grad_manager.hpp"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/frozen.hpp"
#include "autodiff/group_access.hpp"
#include "autodiff/inspect.hpp"
#include "hooks/op_hooks.hpp"
#include "backend/copy.hpp"
#include "core/grad_check.hpp"
#include "core/view.hpp"
#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/amp_step.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::autodiff {

namespace {

// Every attached tensor id with the number of managers it is attached to.
class AttachedRegistry {
 public:
  void add(uint64_t id) {
    std::lock_guard lock(mutex_);
    ++count_[id];
  }
  void remove(uint64_t id) {
    std::lock_guard lock(mutex_);
    auto it = count_.find(id);
    if (it != count_.end() && --it->second == 0) count_.erase(it);
  }
  bool contains(uint64_t id) {
    std::lock_guard lock(mutex_);
    return count_.contains(id);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, int> count_;
};

AttachedRegistry& registry() {
  static AttachedRegistry* r = new AttachedRegistry;  // outlives static managers
  return *r;
}

uint64_t& epoch() {
  thread_local uint64_t e = 0;
  return e;
}

}  // namespace

bool is_attached(uint64_t id) { return registry().contains(id); }

struct AttachedTensor {
  std::weak_ptr<TensorImpl> tensor;
  uint64_t id;
  std::vector<GradCallback> callbacks;
};

struct GradManager::State {
  std::vector<AttachedTensor> attached;
  std::unordered_map<uint64_t, size_t> attached_index;  // id -> position in `attached`
  bool recording = false;
  std::vector<GradManager*>* recording_list = nullptr;  // the recording thread's list
  std::unordered_set<uint64_t> tracked;
  std::vector<std::shared_ptr<Node>> tape;
  std::vector<std::function<void()>> after_backward;
  std::vector<std::function<void()>> between_nodes;  // register_backward_progress_callback
  uint64_t group = 0;  // the group this recording belongs to; 0 when recording alone
  // Gradients made by a backward recorded here (create_graph, or a nested
  // manager's backward) through an op whose backward is not differentiable,
  // with that op's name: they are tracked, so ops on them are recorded, and a
  // backward whose gradient reaches one throws rather than miss its term.
  std::unordered_map<uint64_t, std::string> unrecorded;
  uint64_t backwards = 0;    // backward_count()
  GradScaling scaling_now;   // backward_scaling(), during a backward

  void drop_dead() {
    auto dead = [](const AttachedTensor& a) { return a.tensor.expired(); };
    if (std::none_of(attached.begin(), attached.end(), dead)) return;
    for (const auto& a : attached)
      if (dead(a)) registry().remove(a.id);
    std::erase_if(attached, dead);
    attached_index.clear();
    for (size_t i = 0; i < attached.size(); ++i) attached_index[attached[i].id] = i;
  }
};

namespace detail {

std::vector<GradManager*>& recording_managers() {
  thread_local std::vector<GradManager*> managers;
  return managers;
}

int& recording_paused() {
  thread_local int paused = 0;
  return paused;
}

uint64_t recording_epoch() { return epoch(); }

}  // namespace detail

// The tape hooks need the State; they are friends in all but name.
struct TapeAccess {
  static GradManager::State& state(GradManager* gm);
};

namespace detail {
bool tracks(GradManager* gm, uint64_t id) { return TapeAccess::state(gm).tracked.contains(id); }
void push(GradManager* gm, const std::shared_ptr<Node>& node) {
  auto& s = TapeAccess::state(gm);
  s.tape.push_back(node);
  s.tracked.insert(node->output_id);
}
}  // namespace detail

RecordingScope::~RecordingScope() {
  if (gm_) gm_->release();
}

GradManager::GradManager() : state_(std::make_unique<State>()) {}

GradManager::~GradManager() {
  release();
  for (const auto& a : state_->attached) registry().remove(a.id);
}

GradManager& GradManager::attach(const Tensor& tensor, const std::vector<GradCallback>& callbacks) {
  return attach(std::vector<Tensor>{tensor}, callbacks);
}

GradManager& GradManager::attach(const std::vector<Tensor>& tensors, const std::vector<GradCallback>& callbacks) {
  for (const Tensor& t : tensors) {  // validate all first: a throw changes nothing
    if (!t.defined()) throw StateError("GradManager::attach: undefined tensor");
    if (!is_floating_point(t.dtype()))
      throw DTypeError("GradManager::attach: only floating tensors have gradients, got " +
                       std::string(to_string(t.dtype())) + " tensor of shape " + to_string(t.shape()));
  }
  auto& s = *state_;
  s.drop_dead();
  for (const Tensor& t : tensors) {
    auto it = s.attached_index.find(t.id());
    if (it == s.attached_index.end()) {
      s.attached_index.emplace(t.id(), s.attached.size());
      s.attached.push_back({t.impl_ptr(), t.id(), callbacks});
      registry().add(t.id());
    } else {
      auto& cbs = s.attached[it->second].callbacks;
      cbs.insert(cbs.end(), callbacks.begin(), callbacks.end());
    }
    if (s.recording && !detail::is_frozen_id(t.id())) s.tracked.insert(t.id());
  }
  return *this;
}

std::vector<Tensor> GradManager::attached_tensors() const {
  std::vector<Tensor> out;
  out.reserve(state_->attached.size());
  for (const auto& a : state_->attached)
    if (auto p = a.tensor.lock()) out.emplace_back(std::move(p));
  return out;
}

namespace {
void begin_recording(GradManager* gm, GradManager::State& s, uint64_t group) {
  s.drop_dead();
  s.tracked.clear();
  // A frozen tensor is not tracked: no op records a gradient path into it,
  // so the backward neither computes nor stores its gradient.
  for (const auto& a : s.attached)
    if (!detail::is_frozen_id(a.id)) s.tracked.insert(a.id);
  s.recording = true;
  ++epoch();
  s.recording_list = &detail::recording_managers();
  s.recording_list->push_back(gm);
  s.group = group;
}

std::atomic<uint64_t> next_group_token{1};
}  // namespace

RecordingScope GradManager::record() {
  auto& s = *state_;
  if (s.recording) throw StateError("GradManager::record: already recording");
  begin_recording(this, s, 0);
  return RecordingScope(*this);
}

uint64_t detail::new_group_token() { return next_group_token.fetch_add(1); }

void detail::record_in_group(GradManager& gm, uint64_t token) {
  auto& s = TapeAccess::state(&gm);
  if (s.recording) throw StateError("GradManagerGroup::record: a member is already recording");
  begin_recording(&gm, s, token);
}

void detail::release_in_group(GradManager& gm, uint64_t token) {
  if (TapeAccess::state(&gm).group == token) gm.release();
}

void GradManager::release() {
  auto& s = *state_;
  if (!s.recording) return;
  std::erase(*s.recording_list, this);
  s.recording = false;
  ++epoch();
  s.recording_list = nullptr;
  s.tape.clear();
  s.tracked.clear();
  s.unrecorded.clear();
  s.group = 0;
}

bool GradManager::is_recording() const { return state_->recording; }

void GradManager::backward(const Tensor& y, const Tensor& dy) { backward(y, dy, BackwardOptions{}); }

void GradManager::backward(const Tensor& y, const Tensor& dy, const BackwardOptions& options) {
  backward(std::vector<Tensor>{y}, dy.defined() ? std::vector<Tensor>{dy} : std::vector<Tensor>{}, options);
}

void GradManager::backward(const std::vector<Tensor>& ys, const std::vector<Tensor>& dys) {
  backward(ys, dys, BackwardOptions{});
}

namespace {

/// True when t's elements fill its memory densely in its own memory format
/// (contiguous or channels-last): a gradient kept as it is.
bool dense(const Tensor& t) { return t.is_contiguous(t.suggest_memory_format()); }

/// `have`, replaced first by a dense copy of its own (in its memory format)
/// where something else holds it (a node's output, a view): an accumulator
/// added into in place.
Tensor& owned(Tensor& have) {
  if (have.impl()->storage.use_count() > 1 || have.impl_ptr().use_count() > 1 || !dense(have)) {
    Tensor own = empty(have.shape(), have.dtype(), have.device(), have.suggest_memory_format());
    backend::copy(have, own);
    have = own;
  }
  return have;
}

void accumulate(std::unordered_map<uint64_t, Tensor>& grads, uint64_t id, Tensor g) {
  auto [it, fresh] = grads.try_emplace(id, g);
  if (fresh) return;
  backend::accumulate(owned(it->second), g);
}

/// `g` placed in `block` of a gradient of `shape`: the block of `full`.
Tensor block_of(const Tensor& full, const Tensor& g, const InputGrads::Block& block) {
  return view::make(full, g.shape(), full.strides(), full.impl()->offset + block.start * full.strides()[block.dim]);
}

/// Adds `g`, the gradient of `block` of a tensor of `shape` (zero outside
/// it), to the gradient accumulated for `id`: into that block of it, or
/// into zeros of `shape` when it is the first.
void accumulate_block(std::unordered_map<uint64_t, Tensor>& grads, uint64_t id, const Tensor& g,
                      const InputGrads::Block& block, const Shape& shape) {
  auto it = grads.find(id);
  if (it == grads.end()) {
    Tensor full = empty(shape, g.dtype(), g.device());
    backend::fill(full, 0.0);
    backend::copy(g, block_of(full, g, block));
    grads.emplace(id, std::move(full));
    return;
  }
  const Tensor& have = owned(it->second);
  backend::accumulate(block_of(have, g, block), g);
}

[[noreturn]] void throw_unrecorded(std::string_view dtype, const Shape& shape, const std::string& op) {
  throw StateError("GradManager::backward: the gradient reaches a " + std::string(dtype) + to_string(shape) +
                   " tensor computed by the recorded backward of " + op +
                   ", whose backward is not differentiable (not twice differentiable, see docs/autodiff.md); "
                   "the higher-order gradient would miss its term. Keep that op out of the recorded backward "
                   "(run the inner backward outside this recording, without create_graph, or group the "
                   "managers gm1 | gm2 when their gradients are independent)");
}

// The op a node records, for errors: its table name ("F::conv2d"), or the
// name its closure gave (a user's autodiff::Function).
std::string op_name_of(const Node& node, const InputGrads& input_grads) {
  if (input_grads.op()) return std::string("F::") + input_grads.op();
  if (node.op != OpKind::kCount) return "F::" + std::string(op_name(node.op));
  return "an op outside the op table";
}

// Sets up a recorded backward: the thread's recording list becomes the
// managers that record it, recording is unpaused and autocast is off (the
// backward keeps the forward's dtypes); all restored at the end.
class GraphScope {
 public:
  explicit GraphScope(std::vector<GradManager*> recorders)
      : list_(detail::recording_managers()), saved_(list_), paused_(detail::recording_paused()) {
    list_ = std::move(recorders);
    recorders_ = list_;
    detail::recording_paused() = 0;
    autocast_.emplace(false);
  }
  ~GraphScope() {
    autocast_.reset();
    detail::recording_paused() = paused_;
    // Keep what still records: a callback may have ended a manager or
    // started one during the walk.
    std::vector<GradManager*> now = std::move(list_);
    list_.clear();
    for (GradManager* m : saved_)
      if (m->is_recording()) list_.push_back(m);
    for (GradManager* m : now)
      if (std::find(recorders_.begin(), recorders_.end(), m) == recorders_.end() &&
          std::find(list_.begin(), list_.end(), m) == list_.end())
        list_.push_back(m);
  }
  GraphScope(const GraphScope&) = delete;
  GraphScope& operator=(const GraphScope&) = delete;

 private:
  std::vector<GradManager*>& list_;
  std::vector<GradManager*> saved_;
  std::vector<GradManager*> recorders_;
  int paused_;
  std::optional<amp::autocast> autocast_;
};

}  // namespace

// Gradients of a closure that cannot record itself, in a recorded backward:
// marked on every recorder, so that differentiating through them later
// throws (naming the op).
[[gnu::noinline]] static void mark_unrecorded(const std::vector<GradManager*>& recorders, const Node& node,
                                              const InputGrads& input_grads) {
  const std::vector<Tensor>& gs = const_cast<InputGrads&>(input_grads).grads();
  const std::string name = op_name_of(node, input_grads);
  for (size_t i = 0; i < gs.size(); ++i) {
    if (!gs[i].defined() || !node.needs[i]) continue;
    for (GradManager* m : recorders) {
      auto& ms = TapeAccess::state(m);
      if (!ms.recording) continue;
      ms.unrecorded.emplace(gs[i].id(), name);
      ms.tracked.insert(gs[i].id());
    }
  }
}

namespace {

// The recorded walk's variants of its steps, kept out of line so that the
// ordinary walk compiles as before.

[[gnu::noinline]] Tensor convert_recorded(const Tensor& g, DType dtype) {
  return g.dtype() == dtype ? g : F::astype(g, dtype);
}

[[gnu::noinline]] void add_recorded(std::unordered_map<uint64_t, Tensor>& grads, uint64_t id, Tensor g) {
  auto [it, fresh] = grads.try_emplace(id, g);
  if (!fresh) it->second = F::add(it->second, g);  // out of place: both may be saved by recorded ops
}

// .grad() becomes the tracked result (out of place, so a gradient an earlier
// op saved keeps its value, and never a broadcast view).
[[gnu::noinline]] void set_recorded_grads(std::vector<std::pair<Tensor, Tensor>>& updates) {
  for (auto& [t, grad] : updates) {
    Tensor have = t.grad();
    t.set_grad(have.defined() ? F::add(have, grad) : (dense(grad) ? grad : grad.contiguous()));
  }
}

// .grad() += grad for each update, in place where that is safe.
void write_added(std::vector<std::pair<Tensor, Tensor>>& updates, const std::vector<GradManager*>& thread_list) {
  // A `.grad()` that a recording manager tracks (the result of a recorded
  // backward) may be saved by its ops: add out of place, never into it.
  auto in_a_graph = [&](const Tensor& g) {
    for (GradManager* m : thread_list)
      if (TapeAccess::state(m).tracked.contains(g.id())) return true;
    return false;
  };
  for (auto& [t, grad] : updates) {
    Tensor have = t.grad();
    if (have.defined() && !thread_list.empty() && in_a_graph(have)) {
      Tensor sum = empty(have.shape(), have.dtype(), have.device());
      backend::copy(have, sum);
      backend::accumulate(sum, grad);
      t.set_grad(sum);
    } else if (have.defined()) {
      backend::accumulate(have, grad);
    } else if (grad.impl_ptr().use_count() == 1 && grad.impl()->storage.use_count() == 1 && dense(grad)) {
      t.set_grad(std::move(grad));  // we hold the only handle: adopt it
    } else {  // laid out as the tensor (PyTorch's gradient layout: a channels-last weight's is too)
      Tensor own = empty(grad.shape(), grad.dtype(), grad.device(), t.suggest_memory_format());
      backend::copy(grad, own);
      t.set_grad(own);
    }
  }
}

void check_outputs(const std::vector<Tensor>& ys, const std::vector<Tensor>& dys) {
  if (!dys.empty() && dys.size() != ys.size())
    throw ShapeError("GradManager::backward: " + std::to_string(ys.size()) + " outputs but " +
                     std::to_string(dys.size()) + " output gradients");
  for (size_t i = 0; i < ys.size(); ++i) {
    if (!ys[i].defined()) throw StateError("GradManager::backward: output " + std::to_string(i) + " is undefined");
    if (!is_floating_point(ys[i].dtype()))
      throw DTypeError("GradManager::backward: output of dtype " + std::string(to_string(ys[i].dtype())) +
                       " has no gradient");
    if (dys.empty()) continue;
    if (!dys[i].defined()) continue;
    if (dys[i].shape() != ys[i].shape())
      throw ShapeError("GradManager::backward: dy of shape " + to_string(dys[i].shape()) + " for y of shape " +
                       to_string(ys[i].shape()));
    if (dys[i].device() != ys[i].device())
      throw DeviceError("GradManager::backward: dy on " + to_string(dys[i].device()) + " for y on " +
                        to_string(ys[i].device()));
  }
}

// What one backward walks: the tape it took, what the tape tracked, the
// gradients flowing (seeded with the outputs'), and the plan made before
// the walk (which nodes run, and when each attached tensor is final).
struct Walk {
  std::vector<std::shared_ptr<Node>> tape;
  std::unordered_set<uint64_t> tracked;
  std::unordered_map<uint64_t, std::string> unrecorded;
  std::unordered_map<uint64_t, Tensor> grads;
  std::vector<char> runs;                     // by tape position: the node's output receives a gradient
  std::unordered_map<uint64_t, int> pending;  // attached id -> feeding slots still to process; -1 once fired
  std::unordered_set<uint64_t> produced;      // attached ids that are also the output of a running node
};

// Adds node input i's gradient (set whole, or as a block by set_block) to
// the gradient flowing to that input, converted to the input's dtype.
template <bool kRecorded>
void add_input_grad(Walk& w, const Node& node, InputGrads& input_grads, size_t i) {
  Tensor& gi = input_grads.grads()[i];
  if (!gi.defined()) return;
  const Tensor g = kRecorded ? convert_recorded(gi, node.input_dtypes[i]) : ops::in_dtype(gi, node.input_dtypes[i]);
  if (const InputGrads::Block* b = input_grads.block(i)) {
    if (kRecorded || b->dim < 0 || b->dim >= gi.ndim() || b->start < 0 ||
        gi.shape()[b->dim] > node.input_shapes[i][b->dim] - b->start)
      throw Error("GradManager::backward: internal error: a gradient block of shape " + to_string(gi.shape()) +
                  " for an input of shape " + to_string(node.input_shapes[i]) +
                  (kRecorded ? " in a recorded backward" : ""));
    accumulate_block(w.grads, node.input_ids[i], g, *b, node.input_shapes[i]);
    return;
  }
  if (gi.shape() != node.input_shapes[i])
    throw Error("GradManager::backward: internal error: gradient of shape " + to_string(gi.shape()) +
                " for an input of shape " + to_string(node.input_shapes[i]));
  if constexpr (kRecorded) add_recorded(w.grads, node.input_ids[i], g);
  else accumulate(w.grads, node.input_ids[i], g);
}

// Runs attached tensor `id`'s callbacks on its final gradient and queues
// what they return for .grad() (nothing in .grad() changes until every
// callback and after-backward hook has run).
template <bool kRecorded>
void fire(GradManager::State& s, Walk& w, uint64_t id, std::vector<std::pair<Tensor, Tensor>>& updates) {
  w.pending[id] = -1;
  auto g = w.grads.find(id);
  if (g == w.grads.end()) return;  // every contribution was undefined
  auto at = s.attached_index.find(id);
  if (at == s.attached_index.end()) return;
  Tensor t(s.attached[at->second].tensor.lock());
  if (!t.defined()) return;
  Tensor grad = g->second;
  if (!w.produced.contains(id)) w.grads.erase(g);  // else its producer still needs it
  // A copy: a callback may attach (and so grow the list) while it runs.
  const std::vector<GradCallback> callbacks = s.attached[at->second].callbacks;
  // MegEngine's chain: each callback gets what the previous one returned,
  // an undefined tensor included, and an undefined result means "no
  // gradient for this tensor in this backward".
  for (const auto& cb : callbacks) grad = cb(t, grad);
  if (!grad.defined()) return;
  if (grad.shape() != t.shape())
    throw ShapeError("GradManager::backward: a callback returned a gradient of shape " + to_string(grad.shape()) +
                     " for a tensor of shape " + to_string(t.shape()));
  grad = kRecorded ? convert_recorded(grad, t.dtype()) : ops::in_dtype(grad, t.dtype());
  updates.emplace_back(std::move(t), std::move(grad));
}

// The walk proper, which GradManager::backward runs after planning: runs
// the closures in reverse, fires the callbacks, runs the hooks and returns
// what write_grads adds to .grad(). Instantiated twice, so that the
// ordinary walk (kRecorded false) carries no trace of the recorded one.
template <bool kRecorded>
std::vector<std::pair<Tensor, Tensor>> walk(GradManager::State& s, Walk& w, const std::vector<Tensor>& ys,
                                            const std::vector<GradManager*>& recorders) {
  std::vector<std::pair<Tensor, Tensor>> updates;
  auto consumed = [&](uint64_t id) {
    auto p = w.pending.find(id);
    if (p != w.pending.end() && p->second > 0 && --p->second == 0) fire<kRecorded>(s, w, id, updates);
  };
  for (const Tensor& y : ys)  // an attached output no op feeds on is final already
    if (auto p = w.pending.find(y.id()); p != w.pending.end() && p->second == 0) fire<kRecorded>(s, w, y.id(), updates);

  // A copy, as for the hooks below; without any, a node costs one compare.
  const std::vector<std::function<void()>> progress = s.between_nodes;
  for (size_t k = w.tape.size(); k-- > 0;) {
    std::shared_ptr<Node> node = std::move(w.tape[k]);  // freed (with its saved tensors) after this step
    if (!w.runs[k]) continue;
    InputGrads input_grads(node->needs, kRecorded);
    if (auto g = w.grads.find(node->output_id); g != w.grads.end()) {
      Tensor grad_out = std::move(g->second);
      w.grads.erase(g);  // an intermediate gradient lives only until consumed
      node->backward(grad_out, input_grads);
      if constexpr (kRecorded)
        if (!input_grads.asked()) mark_unrecorded(recorders, *node, input_grads);
    }
    // Every slot the plan counted is counted down, with or without a gradient.
    for (size_t i = 0; i < node->input_ids.size(); ++i) {
      if (!node->needs[i] || !w.tracked.contains(node->input_ids[i])) continue;
      add_input_grad<kRecorded>(w, *node, input_grads, i);
      consumed(node->input_ids[i]);
    }
    for (const auto& p : progress) p();
  }
  for (const auto& [id, left] : w.pending)  // the plan is exact; this only guards against a lost gradient
    if (left >= 0 && w.grads.contains(id)) fire<kRecorded>(s, w, id, updates);

  // MegEngine's order: the hooks run after every callback and before any
  // .grad() changes, so a hook that waits for asynchronous reductions
  // started by the callbacks does so before their results are read.
  const std::vector<std::function<void()>> hooks = s.after_backward;
  for (const auto& hook : hooks) hook();
  return updates;
}

// Adds each update to its tensor's .grad() and marks the result with how a
// loss scale multiplies it: `scaling` (that of the backward's outputs and
// dys) accumulated onto the mark of what was there.
template <bool kRecorded>
void write_grads(std::vector<std::pair<Tensor, Tensor>>& updates, const GradScaling& scaling,
                 const std::vector<GradManager*>& thread_list) {
  // A gradient set by hand is accumulated into below; check them all before
  // any changes (Tensor::set_grad checked it already, this keeps the
  // accumulation safe whatever path set it).
  for (const auto& [t, grad] : updates)
    if (t.grad().defined()) mixgrad::detail::check_grad(t, t.grad(), "GradManager::backward");
  std::vector<GradScaling> marks;
  marks.reserve(updates.size());
  for (const auto& [t, grad] : updates)
    marks.push_back(t.grad().defined() ? accumulated_scaling(grad_scaling(t.grad()), scaling) : scaling);
  if constexpr (kRecorded) {
    set_recorded_grads(updates);
  } else {
    write_added(updates, thread_list);
  }
  for (size_t i = 0; i < updates.size(); ++i) set_grad_scaling(updates[i].first.grad(), std::move(marks[i]));
}

// How a loss scale multiplies the upstream gradients a backward starts from:
// an output marked by scaler.scale(loss), or a dy formed by scaler.backward,
// is scaled; a dy the user gave is of unknown scale; ones on an unmarked
// output are not scaled. Several outputs combine as accumulation does.
GradScaling scaling_of_outputs(const std::vector<Tensor>& ys, const std::vector<Tensor>& dys) {
  std::optional<GradScaling> all;
  for (size_t i = 0; i < ys.size(); ++i) {
    const Tensor dy = dys.empty() ? Tensor() : dys[i];
    const GradScaling y_mark = grad_scaling(ys[i]), dy_mark = grad_scaling(dy);
    GradScaling one;
    if (y_mark.state == ScaleState::scaled) {
      one = dy_mark.state == ScaleState::scaled ? GradScaling{.found_inf = {}, .state = ScaleState::mixed} : y_mark;
    } else if (dy_mark.state == ScaleState::scaled) {
      one = dy_mark;
    } else if (dy.defined()) {
      one = {.found_inf = {}, .state = ScaleState::unknown};
    }
    one.found_inf = Tensor();
    all = all ? accumulated_scaling(*all, one) : one;
  }
  return all.value_or(GradScaling{});
}

}  // namespace

namespace {

// The outer managers of `gm`'s recording: recording since before it and
// not in its group. MegEngine records its backward on them (how nested
// managers give higher order); members of one group, and managers that
// started later, do not see it.
std::vector<GradManager*> outer_managers(const GradManager::State& s, const GradManager* gm) {
  std::vector<GradManager*> outer;
  for (GradManager* m : *s.recording_list) {
    if (m == gm) break;
    if (s.group == 0 || TapeAccess::state(m).group != s.group) outer.push_back(m);
  }
  return outer;
}

// The gradients the walk starts from: dy (ones where none is given) for
// each output the tape tracks.
void seed_grads(Walk& w, const std::vector<Tensor>& ys, const std::vector<Tensor>& dys) {
  for (size_t i = 0; i < ys.size(); ++i) {
    if (auto u = w.unrecorded.find(ys[i].id()); u != w.unrecorded.end())
      throw_unrecorded(to_string(ys[i].dtype()), ys[i].shape(), u->second);
    if (!w.tracked.contains(ys[i].id())) continue;
    Tensor dy = (dys.empty() || !dys[i].defined()) ? empty(ys[i].shape(), ys[i].dtype(), ys[i].device()) : dys[i];
    if (dys.empty() || !dys[i].defined()) backend::fill(dy, 1.0);
    accumulate(w.grads, ys[i].id(), ops::in_dtype(dy, ys[i].dtype()));
  }
}

// Plans the walk before running it: a node runs when its output receives a
// gradient, and an attached tensor's gradient is final once every input
// slot of a running node that feeds it has been processed. `pending`
// counts those slots per attached tensor; the walk fires the tensor's
// callbacks when its count reaches zero, so a data-parallel callback can
// start reducing it while the rest of the backward runs.
void plan(const GradManager::State& s, Walk& w) {
  w.runs.assign(w.tape.size(), 0);
  std::unordered_set<uint64_t> live;  // ids that will receive a gradient
  live.reserve(2 * w.tape.size() + w.grads.size());
  for (const auto& [id, g] : w.grads) {
    live.insert(id);
    if (s.attached_index.contains(id)) w.pending.try_emplace(id, 0);
  }
  for (size_t k = w.tape.size(); k-- > 0;) {
    const Node& node = *w.tape[k];
    if (!live.contains(node.output_id)) continue;
    w.runs[k] = 1;
    if (s.attached_index.contains(node.output_id)) w.produced.insert(node.output_id);
    for (size_t i = 0; i < node.input_ids.size(); ++i) {
      if (!node.needs[i] || !w.tracked.contains(node.input_ids[i])) continue;
      if (!w.unrecorded.empty())
        if (auto u = w.unrecorded.find(node.input_ids[i]); u != w.unrecorded.end())
          throw_unrecorded(to_string(node.input_dtypes[i]), node.input_shapes[i], u->second);
      live.insert(node.input_ids[i]);
      if (s.attached_index.contains(node.input_ids[i])) ++w.pending[node.input_ids[i]];
    }
  }
}

// The managers that record this backward: the outer ones that track
// something it reads (dy, or an input of an op it runs). Their recording
// includes the forward; so it includes the backward too, and what the
// backward writes is tracked there.
std::vector<GradManager*> reading_managers(const std::vector<GradManager*>& outer, const Walk& w,
                                           const std::vector<Tensor>& dys) {
  std::vector<GradManager*> recorders;
  for (GradManager* m : outer) {
    const auto& mt = TapeAccess::state(m).tracked;
    bool reads =
        std::any_of(dys.begin(), dys.end(), [&](const Tensor& d) { return d.defined() && mt.contains(d.id()); });
    for (size_t k = 0; k < w.tape.size() && !reads; ++k)
      if (w.runs[k])
        reads = std::any_of(w.tape[k]->input_ids.begin(), w.tape[k]->input_ids.end(),
                            [&](uint64_t id) { return mt.contains(id); });
    if (reads) recorders.push_back(m);
  }
  return recorders;
}

}  // namespace

void GradManager::backward(const std::vector<Tensor>& ys, const std::vector<Tensor>& dys,
                           const BackwardOptions& options) {
  auto& s = *state_;
  if (!s.recording)
    throw StateError(
        "GradManager::backward: not recording; call record() (and keep its scope alive) before the forward pass");
  // The thread-locals, read once: in a shared library each read is a call.
  std::vector<GradManager*>& thread_list = detail::recording_managers();
  int& paused = detail::recording_paused();
  if (s.recording_list != &thread_list)
    throw StateError("GradManager::backward: called on another thread than record()");
  check_outputs(ys, dys);
  const GradScaling scaling = scaling_of_outputs(ys, dys);
  struct Now {  // backward_count() and backward_scaling() for the callbacks and hooks
    State& s;
    ~Now() { s.scaling_now = GradScaling{}; }
  } now{s};
  ++s.backwards;
  s.scaling_now = scaling;
  const bool create_graph = options.create_graph;
  // Inside a no_grad scope (or a backward pass) nothing is recorded, this
  // backward neither.
  const bool may_record = paused == 0;
  if (create_graph && !may_record)
    throw StateError(
        "GradManager::backward: create_graph inside a no_grad scope (or inside another backward) would record "
        "nothing; call it where recording is on");
  const std::vector<GradManager*> outer = outer_managers(s, this);
  // Without create_graph the recording is released up front: whatever
  // happens below, the tape is spent. With it the tape is kept (the
  // forward is differentiated again by the next backward) and this backward
  // is appended to it.
  Walk w;
  if (create_graph) {
    w.tape = s.tape;
    w.tracked = s.tracked;
    w.unrecorded = s.unrecorded;
  } else {
    w.tape = std::move(s.tape);
    w.tracked = std::move(s.tracked);
    w.unrecorded = std::move(s.unrecorded);
    release();
  }
  // Recording paused until the walk (planning records nothing), and through
  // it unless the walk is recorded; as NoRecordScope, on the counter read above.
  struct Pause {
    int& counter;
    bool on = true;
    ~Pause() {
      if (on) --counter;
    }
  } no_record{++paused};
  seed_grads(w, ys, dys);
  plan(s, w);

  std::vector<GradManager*> recorders;
  if (may_record) recorders = reading_managers(outer, w, dys);
  if (may_record && create_graph) recorders.push_back(this);  // and this one, under create_graph
  if (recorders.empty()) {
    auto updates = walk<false>(s, w, ys, recorders);
    write_grads<false>(updates, scaling, thread_list);
  } else {
    --paused;
    no_record.on = false;
    GraphScope graph_scope(recorders);
    auto updates = walk<true>(s, w, ys, recorders);
    write_grads<true>(updates, scaling, thread_list);
  }
}

uint64_t GradManager::backward_count() const { return state_->backwards; }
GradScaling GradManager::backward_scaling() const { return state_->scaling_now; }

GradManager& GradManager::register_after_backward_callback(std::function<void()> callback) {
  if (!callback) throw ValueError("GradManager::register_after_backward_callback: empty callback");
  state_->after_backward.push_back(std::move(callback));
  return *this;
}

GradManager& GradManager::register_backward_progress_callback(std::function<void()> callback) {
  if (!callback) throw ValueError("GradManager::register_backward_progress_callback: empty callback");
  state_->between_nodes.push_back(std::move(callback));
  return *this;
}

GradManager::State& TapeAccess::state(GradManager* gm) { return *gm->state_; }

size_t detail::tape_size(const GradManager& gm) { return TapeAccess::state(const_cast<GradManager*>(&gm)).tape.size(); }

}  // namespace mixgrad::autodiff
