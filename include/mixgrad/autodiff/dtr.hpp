// mixgrad/autodiff/dtr.hpp — dynamic rematerialization under a memory
// threshold (MegEngine's `megengine.dtr`), evicting parts of segments.
//
//   mg::dtr::enable({.eviction_threshold = 512 << 20});     // MegEngine: dtr.eviction_threshold = "512MB"; dtr.enable()
//   for (auto& layer : layers)
//     x = mg::dtr::segment([&](const mg::Tensor& t) { return layer(t); }, x);
//   gm.backward(loss);                                        // evicted segments are recomputed here
//   mg::dtr::stats();                                         // evictions, recomputations, their time
//
// A segment runs its function and keeps everything its backward needs, as
// without DTR. After each segment's forward, while the tensors allocated on
// its device exceed the threshold, DTR evicts the part of a kept segment
// with the lowest h-DTR score: score = recompute cost / (bytes freed x time
// since the segment ran), so cheap, large, old parts go first. A segment
// has these parts: its recorded graph with what its ops saved, less the
// results of its products (matmuls, linears, convolutions, fused attention)
// that the graph holds, which stay; once the graph is gone, each of those
// results. An evicted segment keeps its inputs and the products' results
// not evicted; when the backward reaches it, it runs again as a selective
// activation checkpoint does (autodiff/checkpoint.hpp): the kept results are
// handed back, only the other ops are computed again, under the autocast
// state and random generator state of its first run, so the gradients are
// bit for bit those of the run without DTR. A segment that is never evicted
// costs nothing extra.
//
// Unlike MegEngine, which evicts single tensors and recomputes single ops,
// mixgrad evicts segments' parts: a segment's inputs are never evicted, so a
// recomputation never recurses. A segment whose function must not run
// twice (it calls a collective, or writes a tensor from outside in place)
// calls dtr::pin() while it runs and is never evicted; distributed::
// functional's collectives pin theirs. A segment that alone holds more than
// the threshold throws ValueError naming it, its bytes and the threshold,
// before it reaches the tape (which stays as it was). Without DTR enabled
// (or outside a recording), segment(fn, x) is fn(x).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::dtr {

/// MegEngine's knobs.
struct Options {
  /// Allocated tensor bytes (mg::allocated_bytes() on the segment's device)
  /// above which parts of kept segments are evicted; > 0, else ValueError.
  int64_t eviction_threshold = 0;
  /// Parts of segments freeing fewer bytes are never evicted (MegEngine's
  /// evictee_minimum_size).
  int64_t evictee_minimum_size = 1 << 20;
};

/// Turns DTR on for this thread's segments (ValueError for a threshold <= 0
/// or a negative minimum size).
void enable(const Options& options);
/// Turns it off: later segments run as plain functions; segments already
/// kept stay as they are.
void disable();
bool is_enabled();

/// Keeps the segment running on this thread (if any) from being evicted.
void pin();

/// What DTR did on this thread since the last reset_stats().
struct Stats {
  int64_t segments = 0;         ///< segments run with DTR on
  int64_t evictions = 0;        ///< segments whose graph was evicted (each recomputed in the backward)
  int64_t dropped_results = 0;  ///< products' results of evicted segments freed too (each computed again)
  int64_t evicted_bytes = 0;    ///< what those evictions freed
  int64_t recomputations = 0;   ///< evicted segments run again in a backward
  double recompute_seconds = 0; ///< the time those runs took
};
Stats stats();
void reset_stats();

/// Runs fn(inputs) as a segment DTR may evict (see the file comment);
/// `name` is what errors use. ValueError for an empty function or an
/// undefined output.
std::vector<Tensor> segment(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                            const std::vector<Tensor>& inputs, const std::string& name = "segment");
/// One input, one output.
Tensor segment(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
               const std::string& name = "segment");

}  // namespace mixgrad::dtr
