// train_fashion_mnist/distributed.hpp — --distributed: data-parallel
// training over the processes of `mpirun -np N` (docs/distributed.md).
//
//   train::DataParallel dp;
//   if (!train::start_data_parallel(opts, dp)) return train::kUsageError;
//   auto loader = train::make_train_loader(dp, data->train, opts);   // this rank's share
//   train::attach_data_parallel(dp, runner.grad_manager(), net, scaler);  // broadcast, all-reduce, found-inf
//   train::begin_epoch(dp, epoch);                                   // the shuffle all ranks agree on
//
// Each rank trains on its own share of every epoch (a DistributedSampler
// shuffle drawn from --seed), --batch-size images per rank and step; the
// gradients are averaged over the ranks in buckets during backward, so every
// rank takes the same step. Only rank 0 prints, writes metrics and
// checkpoints, and evaluates; the others' stdout goes to /dev/null.
// Without the distributed library (a build without MPI), --distributed is a
// usage error.
#pragma once

#include <cstdio>
#include <memory>
#include <mixgrad/mixgrad.hpp>
#include <optional>
#if MIXGRAD_EXAMPLE_DISTRIBUTED
#include <mixgrad/distributed.hpp>
#endif

#include "train_fashion_mnist/options.hpp"

namespace train {

struct DataParallel {
  bool on = false;
  int rank = 0;
  int world = 1;
  bool is_main() const { return rank == 0; }
#if MIXGRAD_EXAMPLE_DISTRIBUTED
  std::optional<mg::distributed::ProcessGroup> group;
  std::shared_ptr<mg::distributed::ShardedDataset> shard;
#endif
};

/// Joins the job's process group when --distributed; false (after a message)
/// when this build cannot.
inline bool start_data_parallel(const Options& o, DataParallel& dp) {
  if (!o.distributed) return true;
#if MIXGRAD_EXAMPLE_DISTRIBUTED
  dp.group = mg::distributed::init_process_group();
  dp.on = true;
  dp.rank = dp.group->rank();
  dp.world = dp.group->world_size();
  if (!dp.is_main() && !std::freopen("/dev/null", "w", stdout)) return false;
  return true;
#else
  (void)dp;
  std::fprintf(stderr, "train_fashion_mnist: --distributed needs mixgrad built with MPI "
                       "(apt-get install libopenmpi-dev openmpi-bin, then reconfigure)\n");
  return false;
#endif
}

/// The training loader: the whole set (shuffled from --seed) alone, this
/// rank's share under --distributed.
inline mg::data::DataLoader make_train_loader(DataParallel& dp, const mg::data::TensorDataset& train,
                                              const Options& o) {
#if MIXGRAD_EXAMPLE_DISTRIBUTED
  if (dp.on) {
    dp.shard = std::make_shared<mg::distributed::ShardedDataset>(
        std::make_shared<mg::data::TensorDataset>(train),
        mg::distributed::DistributedSampler(dp.rank, dp.world, train.size(), {.seed = o.seed}));
    return mg::data::DataLoader(std::shared_ptr<const mg::data::Dataset>(dp.shard),
                                {.batch_size = o.batch_size, .device = o.device});
  }
#endif
  (void)dp;
  return mg::data::DataLoader(train, {.batch_size = o.batch_size, .shuffle = true, .seed = o.seed, .device = o.device});
}

/// Attaches the parameters to gm: alone, plainly; under --distributed with
/// rank 0's initial values, the bucketed all-reduce (mean) and the
/// GradScaler's found-inf flag agreed across ranks.
inline void attach_data_parallel(DataParallel& dp, mg::autodiff::GradManager& gm, mg::nn::Module& net,
                                 mg::amp::GradScaler* scaler) {
#if MIXGRAD_EXAMPLE_DISTRIBUTED
  if (dp.on) {
    mg::distributed::broadcast_parameters(*dp.group, net);
    gm.attach(net.parameters(), {mg::distributed::make_allreduce_callback(gm, *dp.group, "mean")});
    if (scaler) mg::distributed::sync_grad_scaler(*dp.group, *scaler);
    return;
  }
#endif
  (void)dp;
  (void)scaler;
  gm.attach(net.parameters());
}

/// Starts epoch `epoch` (0-based) of the shards.
inline void begin_epoch(DataParallel& dp, int64_t epoch) {
#if MIXGRAD_EXAMPLE_DISTRIBUTED
  if (dp.on) dp.shard->set_epoch(epoch);
#endif
  (void)dp;
  (void)epoch;
}

/// The sum of `x` over the ranks (x alone).
inline double sum_over_ranks(DataParallel& dp, double x) {
#if MIXGRAD_EXAMPLE_DISTRIBUTED
  if (dp.on) {
    mg::Tensor t = mg::scalar(x, mg::DType::float64);
    mg::distributed::all_reduce(*dp.group, t, mg::distributed::ReduceOp::sum);
    return t.item<double>();
  }
#endif
  (void)dp;
  return x;
}

/// Before evaluating: BatchNorm's running statistics, gathered per rank
/// from its own shard, averaged over the ranks.
inline void sync_running_stats(DataParallel& dp, mg::nn::Module& net) {
#if MIXGRAD_EXAMPLE_DISTRIBUTED
  if (dp.on) mg::distributed::average_buffers(*dp.group, net);
#endif
  (void)dp;
  (void)net;
}

}  // namespace train
