// The bucketing gradient all-reducer (see grad_reducer.hpp for the rules),
// and, with a ShardScatter (shard_scatter.hpp), the sharded optimizer's
// reduce-scatter during backward on the same buckets and progress thread.
#include "mixgrad/distributed/grad_reducer.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "distributed/group_state.hpp"
#include "distributed/reduce_scatter_work.hpp"
#include "distributed/shard_scatter.hpp"
#include "mixgrad/amp/grad_scaler.hpp"
#include "mixgrad/autodiff/no_grad.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/nn/module.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "core/checks.hpp"

namespace mixgrad::distributed {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kScatterInFlight = 2;  // see Impl::progress

// A run of a tensor's elements in a bucket.
struct Piece {
  int bucket = 0;
  int64_t bucket_offset = 0;  // elements
  int64_t tensor_offset = 0;  // elements
  int64_t count = 0;
};

struct Slot {
  std::weak_ptr<TensorImpl> tensor;
  uint64_t id = 0;
  Shape shape;
  DType dtype = DType::float32;
  Device device = Device::cpu();
  int64_t numel = 0;
  int64_t flat = 0;  // the first element's place in the flat vector (ShardScatter)
  std::vector<Piece> pieces;
  bool arrived = false;  // this backward
  Tensor grad;           // the first backward keeps the gradient until the layout exists
  Tensor result;         // returned to the GradManager, filled by finish()
};

struct Bucket {
  DType dtype = DType::float32;
  Device device = Device::cpu();
  int64_t numel = 0;
  Tensor buffer;
  int pieces = 0;   // pieces of tensors in this bucket
  int missing = 0;  // pieces still to arrive this backward
  bool started = false;
  bool finished = false;
  Work work;
  BucketEvent event;
  // ShardScatter: each rank's count of the bucket, this rank's runs of the
  // flat vector and where they arrive.
  std::vector<int> counts;
  std::vector<detail::FlatRun> runs;
  Tensor recv;
};

// A thread that calls into MPI every `every` while buckets are in flight,
// so their data moves while backward computes (MPI_THREAD_MULTIPLE).
class Poller {
 public:
  Poller(MPI_Comm comm, std::chrono::microseconds every) : comm_(comm), every_(every), thread_([this] { run(); }) {}
  ~Poller() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void set_active(bool on) {
    {
      std::lock_guard lock(mutex_);
      if (active_ == on) return;
      active_ = on;
    }
    if (on) cv_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (!active_) {
        cv_.wait(lock);
        continue;
      }
      lock.unlock();
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, 0x6d67, comm_, &flag, MPI_STATUS_IGNORE);  // drives MPI's progress
      std::this_thread::sleep_for(every_);
      lock.lock();
    }
  }
  MPI_Comm comm_;
  std::chrono::microseconds every_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool active_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace

struct GradReducer::Impl {
  ProcessGroup group;
  ReduceOp op;
  ReducerOptions options;
  Clock::time_point epoch = Clock::now();
  std::vector<Slot> slots;
  std::unordered_map<uint64_t, int> index;  // tensor id -> slot
  std::vector<Bucket> buckets;
  bool laid_out = false;
  bool broken = false;
  int next = 0;  // the next bucket to start: buckets start in order on every rank
  int seen = 0;  // buckets [0, seen) are seen finished; [seen, next) are running
  bool timeline_on = false;
  std::vector<BucketEvent> timeline;
  std::shared_ptr<detail::ShardScatter> scatter;  // null: all-reduce (plain data parallel)
  // The manager whose backwards feed this reducer, and the backward_count()
  // of the one in progress: a new backward that finds the previous one
  // unfinished (a callback or hook threw before finish) is refused.
  const autodiff::GradManager* gm = nullptr;
  uint64_t serial = 0;
  int arrivals = 0;  // gradients taken in this backward

  std::unique_ptr<Poller> poller;  // with progress_thread_us under MPI_THREAD_MULTIPLE

  Impl(ProcessGroup g, ReduceOp o, const ReducerOptions& opts) : group(std::move(g)), op(o), options(opts) {
    int level = 0;
    MPI_Query_thread(&level);
    if (options.progress_thread_us > 0 && level == MPI_THREAD_MULTIPLE && group.world_size() > 1)
      poller = std::make_unique<Poller>(group.state()->comm, std::chrono::microseconds(options.progress_thread_us));
  }

  double now() const { return std::chrono::duration<double>(Clock::now() - epoch).count(); }

  void start(Bucket& b) {
    if (poller && !b.device.is_cuda()) poller->set_active(true);
    b.started = true;
    b.event.start = now();
    if (!scatter) {
      b.work = all_reduce_async(group, b.buffer, op);
      return;
    }
    b.recv = empty(Shape{b.counts[group.rank()]}, b.dtype, b.device);
    b.work = detail::reduce_scatter_async(group, b.buffer, b.recv, b.counts, op);
  }

  // A finished bucket: under ShardScatter, this rank's block goes to the
  // optimizer and the bucket's memory is freed.
  void done(Bucket& b) {
    b.finished = true;
    b.event.finish = now();
    if (!scatter) return;
    scatter->deliver(b.runs, b.recv);
    b.buffer = b.recv = Tensor();
  }

  // Lets MPI progress the running buckets (MPI moves data only inside its
  // calls): one MPI_Test of the oldest drives them all. Between backward
  // nodes; nothing running costs a compare.
  void poll() {
    while (seen < next && buckets[seen].work.test()) done(buckets[seen++]);
  }

  // Starts the complete buckets in order, then polls.
  void progress() {
    while (next < static_cast<int>(buckets.size()) && buckets[next].missing == 0) start(buckets[next++]);
    poll();
    // ShardScatter: at most kScatterInFlight buckets held at once, so that
    // backward never holds more of the gradient than that (a bucket freed
    // is memory backward can take again).
    while (scatter && next - seen > kScatterInFlight) {
      Bucket& b = buckets[seen++];
      b.work.wait();
      done(b);
    }
  }

  // Copies `grad` (a slot's gradient, or zeros when null) into its buckets.
  void pack(Slot& s, const Tensor* grad) {
    const int64_t es = element_size(s.dtype);
    Tensor g;
    if (grad) {
      g = grad->dtype() == s.dtype ? *grad : grad->to(s.dtype);
      if (!g.is_contiguous()) g = g.contiguous();
    }
    for (const Piece& p : s.pieces) {
      Bucket& b = buckets[p.bucket];
      if (!b.buffer.defined()) b.buffer = empty(Shape{b.numel}, b.dtype, b.device);  // ShardScatter: per backward
      char* dst = static_cast<char*>(b.buffer.raw_data()) + p.bucket_offset * es;
      if (grad)
        detail::copy_bytes(s.device, dst, static_cast<const char*>(g.raw_data()) + p.tensor_offset * es,
                           static_cast<size_t>(p.count * es));
      else
        detail::zero_bytes(s.device, dst, static_cast<size_t>(p.count * es));
      --b.missing;
    }
  }

  void unpack(const Slot& s, const Tensor& dst) {
    const int64_t es = element_size(s.dtype);
    for (const Piece& p : s.pieces)
      detail::copy_bytes(s.device, static_cast<char*>(dst.raw_data()) + p.tensor_offset * es,
                         static_cast<const char*>(buckets[p.bucket].buffer.raw_data()) + p.bucket_offset * es,
                         static_cast<size_t>(p.count * es));
  }

  void lay_out() {
    const int64_t bucket_bytes = std::max<int64_t>(options.bucket_bytes, 1);
    for (Slot& s : slots) {
      const int64_t es = element_size(s.dtype);
      const int64_t cap = std::max<int64_t>(bucket_bytes / es, 1);
      int64_t done = 0;
      while (done < s.numel || (s.numel == 0 && s.pieces.empty())) {
        if (buckets.empty() || buckets.back().dtype != s.dtype || buckets.back().device != s.device ||
            buckets.back().numel >= cap) {
          Bucket b;
          b.dtype = s.dtype;
          b.device = s.device;
          b.event.bucket = static_cast<int>(buckets.size());
          buckets.push_back(std::move(b));
        }
        Bucket& b = buckets.back();
        const int64_t n = std::min(cap - b.numel, s.numel - done);
        s.pieces.push_back({static_cast<int>(buckets.size() - 1), b.numel, done, n});
        b.numel += n;
        ++b.pieces;
        done += n;
        if (s.numel == 0) break;
      }
    }
    for (Bucket& b : buckets) {
      if (!scatter) b.buffer = empty(Shape{b.numel}, b.dtype, b.device);
      b.event.bytes = b.numel * element_size(b.dtype);
      b.missing = b.pieces;
    }
    laid_out = true;
  }

  Slot& add_slot(const Tensor& t, Device device) {
    index.emplace(t.id(), static_cast<int>(slots.size()));
    Slot s;
    s.tensor = t.impl_ptr();
    s.id = t.id();
    s.shape = t.shape();
    s.dtype = t.dtype();
    s.device = device;
    s.numel = t.numel();
    slots.push_back(std::move(s));
    return slots.back();
  }

  // ShardScatter: the layout at once, in reverse parameter order, each
  // bucket's pieces in flat order, so each rank's part is one block.
  void lay_out_shards() {
    const std::vector<Tensor>& ts = scatter->tensors;
    std::vector<int64_t> flat(ts.size(), 0);
    for (size_t i = 1; i < ts.size(); ++i) flat[i] = flat[i - 1] + ts[i - 1].numel();
    for (size_t i = ts.size(); i-- > 0;) add_slot(ts[i], ts[i].device()).flat = flat[i];
    lay_out();
    std::vector<std::vector<std::pair<int64_t, Piece*>>> by_bucket(buckets.size());
    for (Slot& s : slots)
      for (Piece& p : s.pieces) by_bucket[p.bucket].emplace_back(s.flat + p.tensor_offset, &p);
    const int64_t per = std::max<int64_t>(scatter->per_rank, 1);
    for (size_t k = 0; k < buckets.size(); ++k) {
      std::sort(by_bucket[k].begin(), by_bucket[k].end());
      Bucket& b = buckets[k];
      b.counts.assign(static_cast<size_t>(group.world_size()), 0);
      int64_t at = 0;
      for (auto& [begin, p] : by_bucket[k]) {
        p->bucket_offset = at;
        at += p->count;
        for (int64_t e = begin, end = begin + p->count; e < end;) {
          const int64_t r = std::min<int64_t>(e / per, group.world_size() - 1);
          const int64_t stop = std::min(end, (r + 1) * per);
          b.counts[r] += static_cast<int>(stop - e);
          if (r == group.rank()) b.runs.emplace_back(e, stop - e);
          e = stop;
        }
      }
    }
  }

  // A backward that finds the previous one unfinished (its after-backward
  // hook never ran: a callback or hook threw) cannot tell which of its
  // buckets the other ranks started: refuse, on this call and every later one.
  void check_fresh() {
    if (!gm) return;
    const uint64_t count = gm->backward_count();
    if (count == serial) return;
    if (arrivals > 0 || next > 0) {
      broken = true;
      if (poller) poller->set_active(false);
      throw StateError(std::string("distributed::GradReducer: rank ")
                           .append(std::to_string(group.rank()))
                           .append(": the previous backward ended before the reducer's after-backward hook ran (a "
                                   "gradient callback or hook threw), with ")
                           .append(std::to_string(next))
                           .append(" bucket(s) started; the ranks' reductions are out of step, so this reducer "
                                   "takes no more gradients: make a new GradManager and reducer, or end the job"));
    }
    serial = count;
  }

  // Every rank must lay out the same tensors: compare a summary before any
  // bucket is reduced (a mismatch would pair different buckets).
  void check_layout() {
    uint64_t h = 1469598103934665603ull;
    for (const Slot& s : slots) {
      h = (h ^ static_cast<uint64_t>(s.numel)) * 1099511628211ull;
      h = (h ^ static_cast<uint64_t>(s.dtype)) * 1099511628211ull;
    }
    Tensor mine = tensor(std::vector<int64_t>{static_cast<int64_t>(slots.size()), static_cast<int64_t>(h >> 1)},
                         Shape{2});
    Tensor all = all_gather(group, mine);
    const auto v = all.to_vector<int64_t>();
    for (int r = 0; r < group.world_size(); ++r)
      if (v[2 * r] != v[0] || v[2 * r + 1] != v[1])
        throw StateError("distributed::GradReducer: the ranks' first backward reached different tensors (rank " +
                         std::to_string(group.rank()) + ": " + std::to_string(slots.size()) +
                         " tensors; rank " + std::to_string(r) + ": " + std::to_string(v[2 * r]) +
                         " tensors, or different sizes or dtypes); every rank's first backward must produce "
                         "gradients for the same tensors");
  }

  Tensor on_grad_ready(const Tensor& t, const Tensor& grad) {
    if (broken)
      throw StateError(std::string("distributed::GradReducer: rank ")
                           .append(std::to_string(group.rank()))
                           .append(": an earlier backward failed on this rank; the reducer is out of step with the "
                                   "other ranks"));
    check_fresh();
    if (!grad.defined()) return grad;
    try {
      ++arrivals;
      if (!laid_out) {
        auto it = index.find(t.id());
        Slot& s = it != index.end() ? slots[it->second] : add_slot(t, grad.device());
        s.arrived = true;
        s.grad = grad;
        s.result = empty(s.shape, s.dtype, s.device);
        return s.result;
      }
      auto it = index.find(t.id());
      if (it == index.end())
        throw StateError("distributed::GradReducer: a gradient for " + core::describe(t) +
                         ", which got none in the first backward, is outside the bucket layout; every rank's "
                         "first backward must reach every tensor the reducer is attached to");
      Slot& s = slots[it->second];
      if (s.arrived)
        throw StateError(std::string("distributed::GradReducer: rank ")
                             .append(std::to_string(group.rank()))
                             .append(": a second gradient for ")
                             .append(core::describe(t))
                             .append(" in one backward"));
      s.arrived = true;
      pack(s, &grad);
      if (scatter) {
        progress();
        return Tensor();
      }
      s.result = empty(s.shape, s.dtype, s.device);
      progress();
      return s.result;
    } catch (...) {
      broken = true;
      if (poller) poller->set_active(false);
      throw;
    }
  }

  void finish() {
    if (broken) return;
    try {
      const double backward_end = now();
      if (!laid_out) {
        check_layout();  // a collective: also on a rank whose backward reached nothing
        if (slots.empty()) return;  // no rank reached anything: lay out in a later backward
        lay_out();
        for (Slot& s : slots) {
          pack(s, &s.grad);
          s.grad = Tensor();
        }
      } else {
        for (Slot& s : slots)
          if (!s.arrived) pack(s, nullptr);  // zeros: the other ranks wait for this bucket
      }
      progress();  // starts every bucket still waiting, in order
      for (Bucket& b : buckets) {
        b.work.wait();
        if (!b.finished) done(b);
        b.event.backward_end = backward_end;
        if (timeline_on) timeline.push_back(b.event);
      }
      if (poller) poller->set_active(false);
      if (!scatter) hand_over();
      reset();
    } catch (...) {
      broken = true;
      if (poller) poller->set_active(false);
      throw;
    }
  }

  // The reduced gradients into the slots' results, or, for a tensor without
  // a gradient here, into its .grad().
  void hand_over() {
    autodiff::no_grad guard;
    for (Slot& s : slots) {
      if (s.arrived) {
        unpack(s, s.result);
      } else if (Tensor t(s.tensor.lock()); t.defined()) {
        // No gradient here, but the other ranks' reduced one: keep the
        // replicas identical.
        Tensor reduced = empty(s.shape, s.dtype, s.device);
        unpack(s, reduced);
        const Tensor have = t.grad();
        t.set_grad(have.defined() ? have + reduced : reduced);
      }
    }
  }

  void reset() {
    for (Slot& s : slots) {
      s.arrived = false;
      s.result = Tensor();  // the GradManager holds the only handle: it adopts it
    }
    for (Bucket& b : buckets) {
      b.missing = b.pieces;
      b.started = b.finished = false;
      b.work = Work();
      b.event = BucketEvent{b.event.bucket, b.event.bytes, 0.0, 0.0, 0.0};
    }
    next = seen = arrivals = 0;
  }
};

GradReducer::GradReducer(ProcessGroup group, const std::string& op, const ReducerOptions& options) {
  const ReduceOp o = parse_reduce_op(op);
  if (o == ReduceOp::max) throw ValueError("distributed::GradReducer: op must be \"mean\" or \"sum\", got \"max\"");
  if (options.bucket_bytes < 1)
    throw ValueError("distributed::GradReducer: bucket_bytes must be positive, got " +
                     std::to_string(options.bucket_bytes));
  if (options.progress_thread_us < 0)
    throw ValueError(std::string("distributed::GradReducer: progress_thread_us must be 0 (no thread) or positive, got ")
                         .append(std::to_string(options.progress_thread_us)));
  impl_ = std::make_unique<Impl>(std::move(group), o, options);
}

GradReducer::GradReducer(ProcessGroup group, const std::string& op, const ReducerOptions& options,
                         std::shared_ptr<detail::ShardScatter> scatter)
    : GradReducer(std::move(group), op, options) {
  impl_->scatter = std::move(scatter);
  impl_->lay_out_shards();
}

GradReducer::~GradReducer() = default;

Tensor GradReducer::on_grad_ready(const Tensor& tensor, const Tensor& grad) { return impl_->on_grad_ready(tensor, grad); }
void GradReducer::finish() { impl_->finish(); }
void GradReducer::progress() {
  if (impl_->broken) return;
  impl_->check_fresh();
  impl_->poll();
}

void GradReducer::attach(autodiff::GradManager& gm, const std::vector<Tensor>& tensors) {
  impl_->gm = &gm;
  impl_->serial = gm.backward_count();
  gm.attach(tensors, {[this](const Tensor& t, const Tensor& g) { return impl_->on_grad_ready(t, g); }});
  gm.register_backward_progress_callback([this] { progress(); });
  gm.register_after_backward_callback([this] { impl_->finish(); });
}

const std::vector<BucketEvent>& GradReducer::timeline() const { return impl_->timeline; }
void GradReducer::record_timeline(bool on) {
  impl_->timeline_on = on;
  if (!on) impl_->timeline.clear();
}
double GradReducer::now() const { return impl_->now(); }
void GradReducer::follow(const autodiff::GradManager& gm) {
  impl_->gm = &gm;
  impl_->serial = gm.backward_count();
}
int GradReducer::num_buckets() const { return static_cast<int>(impl_->buckets.size()); }

autodiff::GradCallback make_allreduce_callback(autodiff::GradManager& gm, const ProcessGroup& group,
                                               const std::string& op, const ReducerOptions& options) {
  auto reducer = std::make_shared<GradReducer>(group, op, options);
  reducer->follow(gm);
  gm.register_backward_progress_callback([reducer] { reducer->progress(); });
  gm.register_after_backward_callback([reducer] { reducer->finish(); });
  return [reducer](const Tensor& t, const Tensor& g) { return reducer->on_grad_ready(t, g); };
}

void broadcast_parameters(const ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  for (const Tensor& t : tensors)
    if (t.defined()) broadcast(group, t, root);
}

void broadcast_parameters(const ProcessGroup& group, const nn::Module& module, int root) {
  broadcast_parameters(group, module.parameters(), root);
  broadcast_parameters(group, module.buffers(), root);
}

void average_buffers(const ProcessGroup& group, const nn::Module& module) {
  for (const Tensor& b : module.buffers())
    if (b.defined() && is_floating_point(b.dtype())) all_reduce(group, b, ReduceOp::mean);
}

void sync_grad_scaler(const ProcessGroup& group, amp::GradScaler& scaler) {
  scaler.set_found_inf_hook([group](const Tensor& found_inf) { all_reduce(group, found_inf, ReduceOp::max); });
}

}  // namespace mixgrad::distributed
