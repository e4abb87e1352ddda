#include "autodiff/selective.hpp"

#include "hooks/kept_results.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::autodiff::detail {

namespace {

struct ActiveScope {
  KeptResults* kept;
  KeptResultsScope::Mode mode;
};

std::vector<ActiveScope>& scopes() {
  thread_local std::vector<ActiveScope> s;
  return s;
}

constexpr OpKind kKeepable[] = {OpKind::matmul, OpKind::linear, OpKind::conv1d, OpKind::conv2d,
                                OpKind::conv_transpose2d, OpKind::scaled_dot_product_attention};

std::string describe_first(const std::vector<Tensor>& results) {
  return results.empty() || !results[0].defined() ? std::string("nothing")
                         : to_string(results[0].shape()) + " " + std::string(to_string(results[0].dtype()));
}

}  // namespace

int& keeping() {
  thread_local int n = 0;
  return n;
}

std::vector<bool> keepable_ops(const std::vector<std::string>& names, const std::string& checkpoint) {
  std::vector<bool> ops(kOpCount, false);
  for (const std::string& name : names) {
    const std::optional<OpKind> op = op_from_name(name);
    bool keepable = false;
    for (OpKind k : kKeepable) keepable = keepable || (op && *op == k);
    if (!keepable) {
      std::string list;
      for (OpKind k : kKeepable) list += (list.empty() ? "" : ", ") + std::string(op_name(k));
      throw ValueError("autodiff::checkpoint '" + checkpoint + "': cannot keep the results of '" + name +
                       "'; the ops whose results a checkpoint keeps are " + list);
    }
    ops[static_cast<size_t>(*op)] = true;
  }
  return ops;
}

bool KeptResults::counts(OpKind k) {
  const int64_t n = calls[static_cast<size_t>(k)]++;
  return !keep_if || keep_if(op_name(k), n);
}

void KeptResults::drop(size_t i) {
  entries[i].results.clear();
  entries[i].versions.clear();
  entries[i].dropped = true;
}

KeptResultsScope::KeptResultsScope(KeptResults& kept, Mode mode) {
  kept.calls.assign(kOpCount, 0);  // each run counts its calls from the first
  scopes().push_back({&kept, mode});
  ++keeping();
}

KeptResultsScope::~KeptResultsScope() {
  scopes().pop_back();
  --keeping();
}

std::optional<std::vector<Tensor>> reuse_results(OpKind op, const Shape& shape, DType dtype) {
  auto& s = scopes();
  const size_t k = static_cast<size_t>(op);
  // The innermost recomputation that keeps this op hands its result back;
  // keeping scopes above it (a nested checkpoint's first run) keep it again.
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (it->mode != KeptResultsScope::Mode::reuse || !it->kept->ops[k]) continue;
    KeptResults& kept = *it->kept;
    if (!kept.counts(op)) return std::nullopt;  // a call keep_if did not keep: computed again
    const std::string where = "autodiff::checkpoint '" + kept.name + "': the recomputation in the backward ";
    if (kept.next >= kept.entries.size())
      throw StateError(where + "ran more kept ops than the first run (" + std::string(op_name(op)) + " after " +
                       std::to_string(kept.entries.size()) + "); the function must compute the same thing again");
    KeptResults::Entry entry = std::move(kept.entries[kept.next++]);
    if (entry.dropped && entry.op == op) return std::nullopt;  // freed by DTR: computed again
    // An undefined first result: the op declined in the first run (a fused
    // kernel that let its composed path run), and declines again.
    const bool declined = entry.results.empty() || !entry.results[0].defined();
    if (entry.op != op || (!declined && (entry.results[0].shape() != shape || entry.results[0].dtype() != dtype)))
      throw StateError(where + "ran " + std::string(op_name(op)) + " giving " + to_string(shape) + " " +
                       std::string(to_string(dtype)) + " where the first run's kept op #" +
                       std::to_string(kept.next) + " was " + std::string(op_name(entry.op)) + " giving " +
                       describe_first(entry.results) + "; the function must compute the same thing again");
    for (size_t i = 0; i < entry.results.size(); ++i)
      if (entry.results[i].defined() && entry.results[i].version() != entry.versions[i]) return std::nullopt;  // written in place since: recompute
    return std::move(entry.results);
  }
  return std::nullopt;
}

void keep_results(OpKind op, const std::vector<Tensor>& results, double seconds) {
  auto& s = scopes();
  const size_t k = static_cast<size_t>(op);
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (!it->kept->ops[k]) continue;
    if (it->mode == KeptResultsScope::Mode::reuse) return;  // below a recomputation: not kept again
    if (!it->kept->counts(op)) continue;
    std::vector<uint64_t> versions;
    for (const Tensor& t : results) versions.push_back(t.defined() ? t.version() : 0);
    it->kept->entries.push_back({op, results, std::move(versions), seconds, false});
  }
}

}  // namespace mixgrad::autodiff::detail
