// mixgrad/distributed/grad_reducer.hpp — data-parallel gradients through
// GradManager callbacks (MegEngine's AllreduceCallback, PyTorch's DDP reducer).
//
//   auto group = mg::distributed::init_process_group();
//   auto net = make_model();
//   mg::distributed::broadcast_parameters(group, net);       // same start on every rank
//   mg::autodiff::GradManager gm;
//   gm.attach(net.parameters(), {mg::distributed::make_allreduce_callback(gm, group, "mean")});
//   { auto rec = gm.record(); gm.backward(loss(net(x_rank), y_rank)); }   // .grad(): the mean over ranks
//   opt.step().clear_grad();                                 // identical step on every rank
//
// How it works. The callback packs each gradient, the moment it is final
// (the gradient-ready hook fires at the gradient's last use in backward),
// into a bucket of about `bucket_bytes` (256 KiB by default); a
// bucket whose gradients have all arrived starts a non-blocking all-reduce
// right away, so communication overlaps the rest of backward; MPI moves the
// data of a running all-reduce only inside MPI calls, so while buckets run a
// thread of the reducer calls into MPI every `progress_thread_us`, and the
// reducer tests its buckets after every op of the backward walk
// (GradManager::register_backward_progress_callback); the after-backward
// hook waits for the buckets still running; the gradients added to .grad()
// are the reduced ones. A tensor may straddle two buckets. Buckets start in
// bucket order on every rank (MPI's rule that every rank issues collectives
// in one order). docs/distributed.md, "Measured", gives the share hidden.
//
// The layout. The buckets are laid out in the first backward, in the order
// in which the gradients became ready there (the last layers first). That
// backward checks that every rank laid out the same tensors (count, sizes,
// dtypes) before it reduces anything, and throws StateError on every rank
// if not; so its buckets all start in the after-backward hook, and overlap
// begins with the second backward. Every rank's first backward must
// therefore reach the same tensors. A tensor outside the layout that gets a
// gradient later throws StateError.
//
// A tensor without a gradient on some rank in a later backward (a branch
// that rank did not take): at the end of backward that rank contributes
// zeros for it, so no rank waits for ever, and every rank gets the reduced
// gradient in .grad() (the replicas stay identical).
//
// Gradient accumulation: each backward reduces its own gradient, and .grad()
// sums the reduced ones, which equals reducing the sum.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/distributed/collectives.hpp"
#include "mixgrad/distributed/process_group.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::nn {
class Module;
}
namespace mixgrad::amp {
class GradScaler;
}

namespace mixgrad::distributed {

namespace detail {
struct ShardScatter;
}

/// 256 KiB: small enough that a model of a few MiB of gradients forms
/// several buckets, the first started early in backward (PyTorch's DDP
/// uses 25 MiB after a 1 MiB first bucket; docs/distributed.md,
/// "Measured", has the measurement behind this choice).
inline constexpr int64_t kDefaultBucketBytes = 256 << 10;

struct ReducerOptions {
  /// Bytes per bucket; a tensor larger than this spans several buckets.
  int64_t bucket_bytes = kDefaultBucketBytes;
  /// Microseconds between the MPI progress calls of the reducer's thread,
  /// which runs while CPU buckets are in flight and sleeps otherwise (0: no
  /// thread). It needs MPI initialised with MPI_THREAD_MULTIPLE, which
  /// init_process_group asks for; without it there is no thread.
  int64_t progress_thread_us = 100;
};

/// One all-reduce of a bucket, on the reducer's clock (seconds since the
/// reducer was made): started, detected finished, and when the backward
/// that produced it ended (the after-backward hook began).
struct BucketEvent {
  int bucket = 0;
  int64_t bytes = 0;
  double start = 0.0;
  double finish = 0.0;
  double backward_end = 0.0;
};

/// The bucketing all-reducer behind make_allreduce_callback.
class GradReducer {
 public:
  /// `op` is "mean" or "sum" (ValueError otherwise).
  GradReducer(ProcessGroup group, const std::string& op, const ReducerOptions& options = {});
  ~GradReducer();
  /// The sharded optimizer's reducer (ShardedOptimizer::attach): the
  /// layout is fixed here and each bucket is reduce-scattered by owner.
  GradReducer(ProcessGroup group, const std::string& op, const ReducerOptions& options,
              std::shared_ptr<detail::ShardScatter> scatter);
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  /// The gradient-ready callback: packs `grad`, starts its bucket when the
  /// bucket is complete, returns a view of the reduced values (filled by
  /// finish()).
  Tensor on_grad_ready(const Tensor& tensor, const Tensor& grad);
  /// The after-backward hook: contributes zeros for tensors of the layout
  /// without a gradient this backward, starts the remaining buckets, waits
  /// for all, and hands the reduced gradients of the tensors that had none
  /// to their .grad().
  void finish();
  /// The between-nodes hook: lets MPI move the running buckets' data and
  /// notes those finished (one MPI_Test; a compare when none is running).
  void progress();

  /// Ties the reducer to the manager whose backwards feed it (attach and
  /// make_allreduce_callback do it): a backward that finds the previous one
  /// unfinished, because a callback or hook threw before the after-backward
  /// hook ran, throws StateError naming the rank, and so does every later
  /// call, as the ranks' buckets may be out of step.
  void follow(const autodiff::GradManager& gm);
  /// Adds the callback and the two hooks to `gm` for `tensors`.
  void attach(autodiff::GradManager& gm, const std::vector<Tensor>& tensors);

  /// The bucket all-reduces of every backward since record_timeline(true)
  /// (one event per bucket and backward, in bucket order), for timelines.
  const std::vector<BucketEvent>& timeline() const;
  /// Starts (true) or stops and clears (false) recording the timeline.
  void record_timeline(bool on);
  /// Seconds since construction on the reducer's clock.
  double now() const;
  /// Buckets in the layout (0 before the first backward).
  int num_buckets() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// MegEngine's `make_allreduce_cb(op, group)`: a GradCallback for
/// `gm.attach(params, {cb})` that all-reduces the gradients ("mean" or
/// "sum") in buckets, overlapping backward; it registers the after-backward
/// hook that completes the buckets on `gm` itself. The reducer lives as long
/// as the callback and the hook.
autodiff::GradCallback make_allreduce_callback(autodiff::GradManager& gm, const ProcessGroup& group,
                                               const std::string& op = "mean",
                                               const ReducerOptions& options = {});

/// Overwrites `tensors` on every rank with rank `root`'s values: one
/// identical start for every replica. Call it before the first step.
void broadcast_parameters(const ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);
/// The module's parameters and buffers (BatchNorm's running statistics
/// included) from `root`.
void broadcast_parameters(const ProcessGroup& group, const nn::Module& module, int root = 0);

/// Averages the module's floating buffers (BatchNorm running means and
/// variances) over the ranks, in place. Without it each rank keeps running
/// statistics of its own shard; call it before evaluating or saving.
void average_buffers(const ProcessGroup& group, const nn::Module& module);

/// Makes `scaler` all-reduce (max) its found-inf flag over the ranks before
/// any step or scale update, so every rank skips the same steps and keeps
/// the same scale. Every rank must call it for its scaler.
void sync_grad_scaler(const ProcessGroup& group, amp::GradScaler& scaler);

}  // namespace mixgrad::distributed
