// Selective checkpointing's bookkeeping (autodiff::checkpoint with `keep`;
// the ops' side is hooks/kept_results.hpp): the results a checkpoint's first
// run keeps, in call order, and the scopes that keep them or hand them back.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/op_table.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::autodiff::detail {

/// What one checkpoint keeps.
struct KeptResults {
  struct Entry {
    OpKind op;
    std::vector<Tensor> results;
    std::vector<uint64_t> versions;  // of the results when kept: an in-place write since makes them stale
    double seconds = 0;              // what computing them took in the first run
    bool dropped = false;            // freed since (DTR): the recomputation computes them again
  };
  std::string name;       // the checkpoint's, for errors
  std::vector<bool> ops;  // by OpKind: kept or not
  std::function<bool(std::string_view, int64_t)> keep_if;  // which calls of a kept op (all when empty)
  std::vector<Entry> entries;
  size_t next = 0;               // the entry the recomputation hands back next
  std::vector<int64_t> calls{};  // by OpKind: the calls of a kept op in the current run

  /// Counts a call of kept op `k` and says whether keep_if keeps it.
  bool counts(OpKind k);
  /// Frees entry `i`'s results: the recomputation computes them again.
  void drop(size_t i);
};

/// The op kinds named in `names` (ops whose results can be kept: the
/// products and fused attention), by OpKind; ValueError naming the checkpoint
/// and the name for any other.
std::vector<bool> keepable_ops(const std::vector<std::string>& names, const std::string& checkpoint);

/// While it lives, keep_or_compute keeps the results of `kept.ops` into
/// `kept` (Mode::keep, the first run) or hands them back from it in order
/// (Mode::reuse, the recomputation). Scopes nest per thread.
class KeptResultsScope {
 public:
  enum class Mode { keep, reuse };
  KeptResultsScope(KeptResults& kept, Mode mode);
  ~KeptResultsScope();
  KeptResultsScope(const KeptResultsScope&) = delete;
  KeptResultsScope& operator=(const KeptResultsScope&) = delete;
};

}  // namespace mixgrad::autodiff::detail
