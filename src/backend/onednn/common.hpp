// What the oneDNN paths of the CPU backend share: the engine and the
// per-thread stream, the status check, a primitive cache keyed by shapes,
// dtypes and options, and memory-descriptor helpers. Include only under
// `#if MIXGRAD_WITH_ONEDNN`.
//
//   Key key(Family::matmul);
//   key.add(a).add(b).add(out);
//   auto entry = cache<MatmulEntry>().find_or_make(key, [&] { return make_matmul(...); });
//   if (!entry) return false;   // oneDNN has no kernel for this: use the fallback
//   execute(entry->prim, {{DNNL_ARG_SRC, memory(entry->src_md, a)}, ...});
#pragma once

#include <dnnl.hpp>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/onednn/onednn.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::backend::onednn {

/// The file and line of a call, filled in at the call site when used as a
/// default argument (`CallSite where = CallSite::current()`). What
/// std::source_location does, which clang before 15 cannot build from
/// libstdc++; __builtin_FILE / __builtin_LINE work in GCC and clang alike.
class CallSite {
 public:
  static constexpr CallSite current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) noexcept {
    return CallSite(file, line);
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }

 private:
  constexpr CallSite(const char* file, unsigned line) noexcept : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};

/// The CPU engine (one per process).
dnnl::engine& engine();
/// The calling thread's stream on engine().
dnnl::stream& stream();

namespace detail {
[[noreturn]] void throw_failure(const char* what, int status, const char* call, const char* file, int line);

template <class Fn>
decltype(auto) checked(Fn&& fn, const char* call, const char* file, int line) {
  try {
    if constexpr (std::is_same_v<decltype(fn()), dnnl_status_t>) {
      const dnnl_status_t s = fn();
      if (s != dnnl_success) throw_failure("status", s, call, file, line);
      return s;
    } else {
      return fn();
    }
  } catch (const dnnl::error& e) {
    throw_failure(e.what(), e.status, call, file, line);
  }
}
}  // namespace detail

/// Evaluates a oneDNN call (C++ API, or C API returning a status) and turns a
/// failure into mixgrad::Error naming the call, the file and the line.
#define MIXGRAD_ONEDNN_CHECK(...)                                                                        \
  ::mixgrad::backend::onednn::detail::checked([&]() -> decltype(auto) { return __VA_ARGS__; }, #__VA_ARGS__, \
                                              __FILE__, __LINE__)

/// Which primitive a cache key is for (keys of different families never meet).
enum class Family : int64_t {
  matmul = 1, conv_forward, conv_backward_data, conv_backward_weights, pool_forward, pool_backward,
  softmax_forward, softmax_backward
};

/// A cache key: a short list of integers (family, shapes, strides, dtypes,
/// options), hashed as it is built. Held inline: no allocation per op.
class Key {
 public:
  static constexpr int kCapacity = 96;
  explicit Key(Family f) { add(static_cast<int64_t>(f)); }
  Key& add(int64_t v);
  /// dtype, rank, extents and strides of a tensor (an undefined one adds a marker).
  Key& add(const Tensor& t);
  Key& add(const Shape& s);
  bool operator==(const Key& o) const;
  size_t hash() const { return hash_; }

 private:
  std::array<int64_t, kCapacity> v_{};
  int n_ = 0;
  size_t hash_ = 1469598103934665603ull;
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash(); }
};

/// Primitives (and what goes with them) by key, per thread, so a training loop
/// builds each primitive once. A null entry records that oneDNN has no kernel
/// for the key. The oldest entries are dropped past kCapacity.
template <class Entry>
class PrimitiveCache {
 public:
  static constexpr size_t kCapacity = 512;

  /// The entry for `key`, made by `make()` (returning std::shared_ptr<Entry>,
  /// null when unimplemented) on the first request.
  template <class Make>
  std::shared_ptr<const Entry> find_or_make(const Key& key, Make&& make) {
    if (auto it = map_.find(key); it != map_.end()) return it->second;
    std::shared_ptr<const Entry> e = make();
    if (map_.size() >= kCapacity) {
      map_.erase(order_.front());
      order_.pop_front();
    }
    map_.emplace(key, e);
    order_.push_back(key);
    return e;
  }
  size_t size() const { return map_.size(); }

 private:
  std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash> map_;
  std::deque<Key> order_;
};

/// The calling thread's cache for one entry type.
template <class Entry>
PrimitiveCache<Entry>& cache() {
  thread_local PrimitiveCache<Entry> c;
  return c;
}

/// Counts one primitive-descriptor creation on this thread (see primitives_created()).
void count_primitive();

/// True for dtypes oneDNN's primitives take here: float32, bfloat16.
constexpr bool native(DType t) { return t == DType::float32 || t == DType::bfloat16; }

/// True when a 16-bit matrix product or convolution in `t` is computed in
/// float32 from its 16-bit storage: float16 always (oneDNN 2.6 has no
/// float16 kernels for CPUs), bfloat16 where the CPU has no bfloat16 dot
/// products or MIXGRAD_MAX_CPU_ISA forbids them (simd::bf16_math()). oneDNN's
/// bfloat16 kernels for such CPUs emulate the products and run several times
/// slower than float32.
bool computes_in_float32(DType t);

dnnl::memory::data_type data_type(DType t);
dnnl::memory::dims dims(const Shape& s);
/// Row-major descriptor of a shape.
dnnl::memory::desc plain_md(const Shape& s, DType t);
/// Descriptor with the tensor's own extents and strides.
dnnl::memory::desc strided_md(const Tensor& t);
/// A memory object over a tensor's data (no copy).
dnnl::memory memory(const dnnl::memory::desc& md, const Tensor& t);
/// A memory object over raw data (no copy); null data for an unused argument.
dnnl::memory memory(const dnnl::memory::desc& md, void* data);

/// Runs a primitive on this thread's stream and waits for it; a failure names
/// the primitive kind and the caller's file and line.
void execute(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args,
             CallSite where = CallSite::current());

/// One argument of a primitive created with format_tag::any: the plain layout
/// mixgrad tensors have, the layout the primitive chose, and the reorder
/// between them when they differ (plain -> chosen for an input, chosen ->
/// plain for an output). Blocked layouts let the convolutions run their
/// direct kernels, about twice as fast as on plain layouts here, reorders
/// included.
struct LayoutArg {
  dnnl::memory::desc plain, chosen;
  dnnl::reorder reorder;  // plain (as float32 when `widen`) <-> chosen; empty when they match
  /// bfloat16 NCHW <-> channels in blocks of 16 (aBcd16b): mixgrad's own
  /// transposes (backend/cpu/channel_blocks.hpp) instead of the reorder.
  bool channel_blocks = false;
  /// 16-bit plain data of a primitive computing in float32: converted as it
  /// is reordered. `block` 8 or 16: NCHW <-> float32 channel blocks in one
  /// pass (channel_blocks::widen_to_blocks); 0: a bulk conversion, then the
  /// float32 reorder if the layouts differ.
  bool widen = false;
  int block = 0;
  int64_t n = 0, c = 0, hw = 0;
  bool reordered() const { return static_cast<bool>(reorder) || widen; }
};
enum class Direction : uint8_t { input, output };
LayoutArg layout_arg(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen, Direction d);

/// Arguments for one execution: tensors in plain layout, reordered into
/// scratch buffers (from mixgrad's caching allocator) where the primitive
/// chose another layout, and reordered back after it ran.
class Execution {
 public:
  void input(int arg, const LayoutArg& layout, const Tensor& t);
  void output(int arg, const LayoutArg& layout, const Tensor& t);
  /// An argument in its own layout (bias, statistics).
  void plain(int arg, const dnnl::memory::desc& md, const Tensor& t) { args_.emplace(arg, memory(md, t)); }
  void run(const dnnl::primitive& p, CallSite where = CallSite::current());

 private:
  struct Pending {
    const LayoutArg* layout;
    dnnl::memory from, to;
  };
  static void reorder(const Pending& r, Direction d, CallSite where);
  static void convert_and_reorder(const Pending& r, Direction d, CallSite where);
  dnnl::memory scratch(const dnnl::memory::desc& md);
  std::unordered_map<int, dnnl::memory> args_;
  std::vector<Pending> before_, after_;
  std::vector<Tensor> buffers_;
};

/// A float32 copy of t (t itself when it is a contiguous float32 tensor):
/// the route of 16-bit products computed in float32. A contiguous t, or a
/// transpose of one, keeps its strides; anything else becomes contiguous.
Tensor to_float32(const Tensor& t);

}  // namespace mixgrad::backend::onednn
