// mixgrad/distributed/sharded_optimizer.hpp — sharded data parallel (ZeRO
// stages 1 and 2; PyTorch's ZeroRedundancyOptimizer, DeepSpeed's ZeRO).
//
//   auto group = mg::distributed::init_process_group();
//   mg::distributed::broadcast_parameters(group, net);          // same start on every rank
//   mg::distributed::ShardedOptimizer opt(group, net.parameters(), [](std::vector<mg::Tensor> shard) {
//     return std::make_unique<mg::optim::AdamW>(std::move(shard), mg::optim::AdamWOptions{.lr = 1e-3});
//   }, {.stage = 2});
//   mg::autodiff::GradManager gm;
//   opt.attach(gm);                                              // reduce-scatter during backward
//   { auto rec = gm.record(); gm.backward(loss(net(x_rank), y_rank)); }
//   opt.step().clear_grad();                                     // the same parameters on every rank
//
// The parameters, taken as one flat vector of P elements in the order
// given, are cut into W equal ranges (the last padded); rank r owns range
// r. The wrapped optimizer is built by the factory over this rank's shard
// only: one 1-D tensor per parameter piece in the range, so its state
// (momenta, Adam's moments) is 1/W of the unsharded state. step():
//   1. reduces the gradients: a reduce-scatter of the flat gradient, each
//      rank receiving only its range (half the traffic of an all-reduce);
//      stage 2 then frees the parameters' full gradients, stage 1 leaves
//      them as backward wrote them (this rank's, not reduced);
//   2. agrees the GradScaler's found-inf flag across ranks (one all-reduce,
//      max) and marks the shard's gradients with it, so that no rank's
//      shard steps when any rank overflowed (the update kernel reads the
//      flag: no host read);
//   3. steps the wrapped optimizer on the shard;
//   4. all-gathers the shards into the parameters.
// Reduced during backward. opt.attach(gm) (instead of gm.attach(params))
// moves step 1 into backward, through GradReducer's buckets and progress
// thread: each gradient, as soon as it is final, is packed into a bucket of
// options.bucket_bytes (laid out in reverse parameter order, each rank's
// part one block); a full bucket is reduce-scattered while backward goes
// on, this rank's part added to the shard's gradient, and the bucket freed.
// Stage 2 then never holds the full gradients (.grad() stays undefined),
// stage 1 leaves .grad() as backward writes it (this rank's own). The shard
// tensors are attached to gm too, with the backward's loss-scale mark, so
// scaler.backward / scaler.unscale / scaler.step unscale the reduced
// gradients; the ranks' scaled gradients are summed, so their scales must
// agree: call sync_grad_scaler. Gradient accumulation: every backward
// reduces and the shard's gradient sums them (as plain data parallel), or
// the micro-batches but the last run under `auto guard = opt.no_sync();`,
// keep their sum on this rank (1x the gradients) and the last backward
// reduces it once; a step after a no_sync backward is a StateError.
//
// The gradients are reduced with "mean" (plain data parallel's default) or
// "sum". A parameter without a gradient on every rank is skipped, as by a
// plain optimizer; one with a gradient on some ranks only gets zeros from
// the others.
//
// Mixed precision. {.master_weights = true} with float16 / bfloat16
// parameters keeps the shard in float32: the shard is this rank's 1/W of
// the float32 master weights (apex's O2), and the all-gather writes their
// rounding to the parameters. Build the wrapped optimizer without its own
// master weights. With a GradScaler, unscale before step() —
// scaler.backward(gm, loss) does by default, or scaler.step(opt), which
// unscales in place and calls step(); a gradient still scaled is a
// StateError. Without sync_grad_scaler the scale itself may still differ
// between ranks after an overflow on one of them: call sync_grad_scaler too.
//
// Clipping. clip_grad_norm(max_norm) after reduce_gradients() computes the
// global norm from the shards (each rank's partial sum, one all-reduce) and
// scales the shard's gradients; step() then uses them.
//
// Checkpoints. save(dir) writes this rank's file,
// "optimizer-shard-R-of-W.safetensors"; load(dir) reads the files of a run
// on any number of ranks (only the files that overlap this rank's range)
// and reshards: train on 2 ranks, resume on 3. The model's parameters are
// saved as usual (they are whole on every rank). load checks first and
// changes nothing on error: IOError naming the missing files, ValueError
// naming what differs for a checkpoint of another model or optimizer.
//
// Every rank must build the optimizer over the same parameter list (count,
// shapes, dtypes, device type): the constructor checks it with two
// all-gathers and throws on every rank, naming the parameter and the ranks'
// shapes (ValueError for the count, ShapeError, DTypeError, DeviceError).
// The parameters must share one dtype and one device (ValueError).
// Limits: one parameter group (the factory gets one list). Without attach
// the gradients are reduced in step(), so stage 2 holds the full gradients
// until the step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/amp_step.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/distributed/process_group.hpp"
#include "mixgrad/optim/optimizer.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::distributed {

class GradReducer;

struct ShardingOptions {
  /// Both reduce-scatter the gradients into the shard; 2 also frees the
  /// parameters' full gradients (at the step, or under attach as soon as
  /// each is packed into its bucket).
  int stage = 1;
  /// "mean" or "sum" over the ranks.
  std::string op = "mean";
  /// Keep the shard of float16 / bfloat16 parameters in float32 (apex's O2).
  bool master_weights = false;
  /// The bucket size of the reduction during backward (attach), and the
  /// largest temporary buffer of the step's reduction and all-gather:
  /// they run in chunks of about this many bytes, so a step holds the
  /// gradients, the shard and the state, never another copy of the whole
  /// flat gradient or parameter vector. Must be > 0 (ValueError).
  int64_t bucket_bytes = 4 << 20;
};

/// Builds the wrapped optimizer over this rank's shard.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> shard)>;

class ShardedOptimizer final : public AmpStepTarget {
 public:
  /// Checks the options (ValueError) and that every rank passed the same
  /// parameter list (see the overview); copies this rank's range of the
  /// parameters into the shard and builds the wrapped optimizer.
  ShardedOptimizer(ProcessGroup group, std::vector<Tensor> params, const OptimizerFactory& make,
                   const ShardingOptions& options = {});
  ~ShardedOptimizer() override;
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  /// From now on the gradients are reduced during backward (see "Reduced
  /// during backward" above): attaches the parameters to `gm` with the
  /// bucketing callback, the shard tensors too (the GradScaler unscales
  /// their gradients), and the two hooks. Call it once (StateError after),
  /// before the first backward; the optimizer must outlive gm's backwards.
  ShardedOptimizer& attach(autodiff::GradManager& gm);

  /// While it lives, backward reduces nothing: the gradients accumulate in
  /// .grad() on this rank, and the next backward outside it reduces them
  /// with its own (PyTorch's no_sync). Needs attach (StateError).
  class [[nodiscard]] NoSync {
   public:
    explicit NoSync(ShardedOptimizer& opt);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    ShardedOptimizer* opt_;
  };
  NoSync no_sync() { return NoSync(*this); }
  /// The reducer behind attach (null before it): its timeline and buckets.
  GradReducer* reducer() const;

  /// Reduces the gradients into the shard (step 1 and 2 of the overview);
  /// step() does it unless called since the last step. Returns *this.
  ShardedOptimizer& reduce_gradients();
  /// The `norm_type`-norm (2, or INFINITY) of the reduced gradient of every
  /// parameter, from the shards; when it exceeds max_norm the shard's
  /// gradients are multiplied by max_norm / norm (computed on the device).
  /// Reduces the gradients first if needed. A 0-d float64 tensor, the same
  /// on every rank; a non-finite norm leaves the gradients as they were.
  Tensor clip_grad_norm(double max_norm, double norm_type = 2.0);
  /// One sharded step (see the overview). Returns *this.
  ShardedOptimizer& step() { return step(AmpStep{}); }
  /// GradScaler::step's entry: `amp.found_inf`, when given, joins the
  /// flags of the gradients.
  ShardedOptimizer& step(const AmpStep& amp) override;
  void check_step(const AmpStep& amp) const override;
  /// Clears the parameters' and the shard's gradients. Returns *this.
  ShardedOptimizer& clear_grad();
  ShardedOptimizer& zero_grad() { return clear_grad(); }

  /// The parameters; after attach, the shard tensors follow them (they hold
  /// the reduced gradients that GradScaler::step must unscale).
  const std::vector<Tensor>& parameters() const override;
  bool step_supports_amp_scaling() const override { return false; }
  /// The wrapped optimizer (its lr, hyper-parameters, state).
  optim::Optimizer& shard_optimizer();
  /// This rank's shard: one 1-D tensor per parameter piece in its range.
  const std::vector<Tensor>& shard() const;
  /// [begin, end) of this rank's range in the flat parameter vector.
  std::pair<int64_t, int64_t> range() const;
  /// Bytes of the optimizer state this rank holds: the wrapped optimizer's
  /// state tensors, and the shard itself when it is a float32 master copy.
  int64_t state_bytes() const;

  /// Writes dir/optimizer-shard-R-of-W.safetensors (creates dir). Every rank calls it.
  void save(const std::filesystem::path& dir) const;
  /// Loads the shard files of a run on any number of ranks (see the
  /// overview) and all-gathers the shard into the parameters. Every rank calls it.
  void load(const std::filesystem::path& dir);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixgrad::distributed
