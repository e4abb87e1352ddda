// The state behind ShardedOptimizer, shared by its step
// (sharded_optimizer.cpp) and its checkpoints (sharded_checkpoint.cpp).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "distributed/shard_scatter.hpp"
#include "mixgrad/distributed/grad_reducer.hpp"
#include "mixgrad/distributed/sharded_optimizer.hpp"

namespace mixgrad::distributed {

/// The part of parameter `param`, elements [param_offset, param_offset +
/// length), that lies in this rank's range, at `shard_offset` in it.
struct ShardPiece {
  size_t param = 0;
  int64_t param_offset = 0, length = 0, shard_offset = 0;
};

/// [begin, end) of rank r's range when `total` elements are cut into `world` ranges.
struct FlatRange {
  int64_t per_rank = 0, begin = 0, end = 0;
};
FlatRange flat_range(int64_t total, int world, int rank);

/// The pieces of parameters of `numels` elements that lie in [begin, end), in order.
std::vector<ShardPiece> pieces_in(const std::vector<int64_t>& numels, int64_t begin, int64_t end);

struct ShardedOptimizer::Impl {
  explicit Impl(ProcessGroup g) : group(std::move(g)) {}
  ProcessGroup group;
  std::vector<Tensor> params;
  ShardingOptions options;
  std::unique_ptr<optim::Optimizer> opt;  // null when this rank's range is empty
  std::vector<int64_t> numels;
  std::vector<ShardPiece> pieces;
  std::vector<Tensor> shard;  // one 1-D tensor per piece
  FlatRange range;
  int64_t total = 0;
  DType dtype = DType::float32, shard_dtype = DType::float32;
  Device device = Device::cpu();
  bool reduced = false;  // the shard holds this step's reduced gradients

  // attach(gm): the gradients are reduced during backward (sharded_backward.cpp).
  std::shared_ptr<GradReducer> reducer;  // null until attach
  std::unordered_map<uint64_t, size_t> param_index;
  std::vector<char> had_grad;  // a gradient on this rank since the last step, per parameter
  std::vector<Tensor> pending;  // per parameter: the sum of the micro-steps under no_sync()
  std::vector<Tensor> amp_params;  // parameters() after attach: the parameters, then the shard
  Tensor acc;  // this backward's reduced range, [per_rank], filled bucket by bucket
  bool sync = true;       // false under no_sync()
  bool unsynced = false;  // a backward under no_sync() since the last reducing one

  /// The gradient callback of attach.
  Tensor on_grad(const Tensor& t, const Tensor& g);
  /// The after-backward hook of attach.
  void finish_backward(const GradScaling& mark);
  /// The reducer's delivery: this rank's runs of one bucket into acc.
  void deliver(const std::vector<detail::FlatRun>& runs, const Tensor& values);
  /// After a reducing backward: acc added to the shard's gradients, which
  /// get the backward's loss-scale mark.
  void take_shard_grads(const GradScaling& mark);

  /// Reduces the parameters' gradients into the shard's, with `extra_flag`
  /// (a found-inf flag, or undefined) among the flags agreed across ranks.
  void reduce(const Tensor& extra_flag);
  /// Writes the shards of every rank into the parameters.
  void gather();
  /// Elements per chunk of reduce_range and gather.
  int64_t chunk_elements() const;
  /// buf (1-D, dtype) <- elements [begin, begin + buf.numel()) of the flat
  /// gradient; zeros where a parameter has no gradient and past the end.
  void fill_from_grads(const Tensor& buf, int64_t begin) const;
  /// Elements [begin, begin + src.numel()) of the flat parameters <- src
  /// (what lies past the end is dropped).
  void write_to_params(const Tensor& src, int64_t begin) const;
  /// This rank's range of the gradients summed over the ranks: [per_rank].
  Tensor reduce_range() const;
};

}  // namespace mixgrad::distributed
