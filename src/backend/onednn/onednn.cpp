// The oneDNN switch, engine, stream, status check and descriptor helpers.
#include "backend/onednn/onednn.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "core/simd.hpp"
#include "core/view.hpp"

#if MIXGRAD_WITH_ONEDNN
#include "backend/copy.hpp"
#include "backend/cpu/channel_blocks.hpp"
#include "backend/onednn/common.hpp"

#include <dnnl_debug.h>
#endif

namespace mixgrad::backend::onednn {

namespace {
std::atomic<Mode> g_mode{MIXGRAD_WITH_ONEDNN ? Mode::automatic : Mode::never};
}  // namespace

bool built() { return MIXGRAD_WITH_ONEDNN != 0; }
Mode mode() { return g_mode.load(std::memory_order_relaxed); }
void set_mode(Mode m) { g_mode.store(built() ? m : Mode::never, std::memory_order_relaxed); }
bool enabled() { return mode() != Mode::never; }

bool use_for(int64_t work) {
  switch (mode()) {
    case Mode::always: return true;
    case Mode::automatic: return work >= kMinWork;
    case Mode::never: return false;
  }
  return false;
}

#if MIXGRAD_WITH_ONEDNN

namespace {
// MIXGRAD_MAX_CPU_ISA caps oneDNN's kernels too, unless oneDNN's own
// variable says otherwise. oneDNN takes a cap only before its first
// primitive, so this runs when the library loads; if oneDNN was used
// earlier all the same, the cap stays mixgrad's own and
// cpu::capabilities() shows the ISA oneDNN runs.
void apply_isa_cap() {
  if (std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr || std::getenv("DNNL_MAX_CPU_ISA") != nullptr) return;
  const std::string_view cap = simd::max_isa_name();
  dnnl::cpu_isa isa = dnnl::cpu_isa::all;
  if (cap == "portable") isa = dnnl::cpu_isa::sse41;
  if (cap == "avx2") isa = dnnl::cpu_isa::avx2;
  if (cap == "avx512") isa = dnnl::cpu_isa::avx512_core;
  if (isa == dnnl::cpu_isa::all) return;
  try {
    dnnl::set_max_cpu_isa(isa);
  } catch (const dnnl::error&) {
  }
}

// A bad MIXGRAD_MAX_CPU_ISA is reported by the first call that reads it.
[[maybe_unused]] const bool isa_cap_at_load = [] {
  try {
    apply_isa_cap();
  } catch (const Error&) {
  }
  return true;
}();
}  // namespace

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

bool computes_in_float32(DType t) {
  return t == DType::float16 || (t == DType::bfloat16 && !simd::bf16_math());
}

// A stream per thread: a stream is not meant to be shared by threads that
// submit concurrently, and a CPU stream costs next to nothing.
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

namespace {
int64_t& primitive_counter() {
  thread_local int64_t n = 0;
  return n;
}
}  // namespace

int64_t primitives_created() { return primitive_counter(); }
void count_primitive() { ++primitive_counter(); }

namespace detail {
void throw_failure(const char* what, int status, const char* call, const char* file, int line) {
  throw Error(std::string("oneDNN call failed (status ") + std::to_string(status) + ": " + what + "): " + call +
              " at " + file + ":" + std::to_string(line));
}
}  // namespace detail

Key& Key::add(int64_t v) {
  if (n_ == kCapacity) throw Error("oneDNN primitive cache: key longer than " + std::to_string(kCapacity));
  v_[n_++] = v;
  hash_ = (hash_ ^ static_cast<size_t>(v)) * 1099511628211ull;
  return *this;
}

Key& Key::add(const Shape& s) {
  add(s.ndim());
  for (int64_t d : s) add(d);
  return *this;
}

Key& Key::add(const Tensor& t) {
  if (!t.defined()) return add(-1);
  add(static_cast<int64_t>(t.dtype()));
  add(t.shape());
  for (int64_t st : t.strides()) add(st);
  return *this;
}

bool Key::operator==(const Key& o) const {
  if (n_ != o.n_ || hash_ != o.hash_) return false;
  for (int i = 0; i < n_; ++i)
    if (v_[i] != o.v_[i]) return false;
  return true;
}

dnnl::memory::data_type data_type(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::float32: return dt::f32;
    case DType::bfloat16: return dt::bf16;
    case DType::float16: return dt::f16;
    case DType::int32: return dt::s32;
    case DType::bool_: return dt::u8;
    case DType::int8: return dt::s8;
    case DType::uint8: return dt::u8;
    default: break;
  }
  throw DTypeError("oneDNN: no data type for " + std::string(to_string(t)));
}

dnnl::memory::dims dims(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

dnnl::memory::desc plain_md(const Shape& s, DType t) {
  return MIXGRAD_ONEDNN_CHECK(dnnl::memory::desc(dims(s), data_type(t), dims(contiguous_strides(s))));
}

dnnl::memory::desc strided_md(const Tensor& t) {
  return MIXGRAD_ONEDNN_CHECK(dnnl::memory::desc(dims(t.shape()), data_type(t.dtype()), dims(t.strides())));
}

dnnl::memory memory(const dnnl::memory::desc& md, const Tensor& t) { return memory(md, t.raw_data()); }

dnnl::memory memory(const dnnl::memory::desc& md, void* data) {
  return MIXGRAD_ONEDNN_CHECK(dnnl::memory(md, engine(), data));
}

void execute(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args, CallSite where) {
  try {
    p.execute(stream(), args);
    stream().wait();
  } catch (const dnnl::error& e) {
    const std::string call =
        "execute(" + std::string(dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(p.get_kind()))) + ")";
    detail::throw_failure(e.what(), e.status, call.c_str(), where.file_name(), static_cast<int>(where.line()));
  }
}

namespace {
// A plain (dense, strided: contiguous or channels-last) descriptor's float32
// twin, with the same strides: the bulk conversion keeps the element order.
dnnl::memory::desc float32_plain(const dnnl::memory::desc& plain) {
  const dnnl::memory::dims dims = plain.dims();
  const auto& blocking = plain.data.format_desc.blocking;
  const dnnl::memory::dims strides(blocking.strides, blocking.strides + dims.size());
  return MIXGRAD_ONEDNN_CHECK(dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides));
}

// The layout argument of 16-bit plain data for a float32 primitive.
LayoutArg widening_layout_arg(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen, Direction d) {
  using tag = dnnl::memory::format_tag;
  LayoutArg a{plain, chosen, {}};
  a.widen = true;
  const dnnl::memory::dims dims = plain.dims();
  const bool nchw = dims.size() == 4 && plain == dnnl::memory::desc(dims, plain.data_type(), tag::abcd);
  for (int block : {8, 16}) {
    const tag blocked = block == 8 ? tag::aBcd8b : tag::aBcd16b;
    if (nchw && dims[1] % block == 0 && chosen == dnnl::memory::desc(dims, chosen.data_type(), blocked)) {
      a.block = block;
      a.n = dims[0];
      a.c = dims[1];
      a.hw = dims[2] * dims[3];
      return a;
    }
  }
  // Converted into (or from) a plain float32 buffer, reordered from there.
  const dnnl::memory::desc f32 = float32_plain(plain);
  if (f32 != chosen) {
    const auto& from = d == Direction::input ? f32 : chosen;
    const auto& to = d == Direction::input ? chosen : f32;
    a.reorder = MIXGRAD_ONEDNN_CHECK(dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to)));
  }
  return a;
}
}  // namespace

LayoutArg layout_arg(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen, Direction d) {
  if (chosen.data_type() == dnnl::memory::data_type::f32 &&
      (plain.data_type() == dnnl::memory::data_type::bf16 || plain.data_type() == dnnl::memory::data_type::f16))
    return widening_layout_arg(plain, chosen, d);
  LayoutArg a{plain, chosen, {}};
  if (plain != chosen) {
    const auto& from = d == Direction::input ? plain : chosen;
    const auto& to = d == Direction::input ? chosen : plain;
    a.reorder = MIXGRAD_ONEDNN_CHECK(dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to)));
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::dims dims = plain.dims();
    if (dims.size() == 4 && plain.data_type() == dnnl::memory::data_type::bf16 &&
        plain == dnnl::memory::desc(dims, plain.data_type(), tag::abcd) &&
        chosen == dnnl::memory::desc(dims, plain.data_type(), tag::aBcd16b)) {
      a.channel_blocks = true;
      a.n = dims[0];
      a.c = dims[1];
      a.hw = dims[2] * dims[3];
    }
  }
  return a;
}

dnnl::memory Execution::scratch(const dnnl::memory::desc& md) {
  buffers_.push_back(empty(Shape{static_cast<int64_t>(md.get_size())}, DType::bool_));
  return memory(md, buffers_.back());
}

void Execution::input(int arg, const LayoutArg& layout, const Tensor& t) {
  if (!layout.reordered()) {
    args_.emplace(arg, memory(layout.plain, t));
    return;
  }
  dnnl::memory m = scratch(layout.chosen);
  before_.push_back({&layout, memory(layout.plain, t), m});
  args_.emplace(arg, m);
}

void Execution::output(int arg, const LayoutArg& layout, const Tensor& t) {
  if (!layout.reordered()) {
    args_.emplace(arg, memory(layout.plain, t));
    return;
  }
  dnnl::memory m = scratch(layout.chosen);
  after_.push_back({&layout, m, memory(layout.plain, t)});
  args_.emplace(arg, m);
}

void Execution::reorder(const Pending& r, Direction d, CallSite where) {
  const LayoutArg& l = *r.layout;
  if (l.widen) return convert_and_reorder(r, d, where);
  if (l.channel_blocks && cpu::channel_blocks::available(l.c)) {
    const auto* from = static_cast<const uint16_t*>(r.from.get_data_handle());
    auto* to = static_cast<uint16_t*>(r.to.get_data_handle());
    if (d == Direction::input) cpu::channel_blocks::to_blocked(from, to, l.n, l.c, l.hw);
    else cpu::channel_blocks::from_blocked(from, to, l.n, l.c, l.hw);
    return;
  }
  execute(l.reorder, {{DNNL_ARG_FROM, r.from}, {DNNL_ARG_TO, r.to}}, where);
}

// 16-bit plain data to or from a float32 primitive's layout: in one pass
// for channel blocks, else a bulk conversion (and the float32 reorder when
// the layouts differ). Both dtypes' conversions round to nearest even.
void Execution::convert_and_reorder(const Pending& r, Direction d, CallSite where) {
  const LayoutArg& l = *r.layout;
  const bool bf16 = l.plain.data_type() == dnnl::memory::data_type::bf16;
  const bool input = d == Direction::input;
  void* plain = (input ? r.from : r.to).get_data_handle();
  auto* f32 = static_cast<float*>((input ? r.to : r.from).get_data_handle());
  if (l.block > 0) {
    if (input && bf16) cpu::channel_blocks::widen_to_blocks(static_cast<const bfloat16*>(plain), f32, l.n, l.c, l.hw, l.block);
    if (input && !bf16) cpu::channel_blocks::widen_to_blocks(static_cast<const half*>(plain), f32, l.n, l.c, l.hw, l.block);
    if (!input && bf16) cpu::channel_blocks::narrow_from_blocks(f32, static_cast<bfloat16*>(plain), l.n, l.c, l.hw, l.block);
    if (!input && !bf16) cpu::channel_blocks::narrow_from_blocks(f32, static_cast<half*>(plain), l.n, l.c, l.hw, l.block);
    return;
  }
  const int64_t count = static_cast<int64_t>(l.plain.get_size()) / 2;
  const auto convert_all = [&](float* to_or_from) {
    if (input) {
      if (bf16) convert(static_cast<const bfloat16*>(plain), to_or_from, count);
      else convert(static_cast<const half*>(plain), to_or_from, count);
    } else {
      if (bf16) convert(to_or_from, static_cast<bfloat16*>(plain), count);
      else convert(to_or_from, static_cast<half*>(plain), count);
    }
  };
  if (!l.reorder) return convert_all(f32);  // the same layout: a conversion alone
  Tensor buffer = empty(Shape{count}, DType::float32);
  const dnnl::memory between = memory(float32_plain(l.plain), buffer);
  if (input) {
    convert_all(buffer.data<float>());
    execute(l.reorder, {{DNNL_ARG_FROM, between}, {DNNL_ARG_TO, r.to}}, where);
  } else {
    execute(l.reorder, {{DNNL_ARG_FROM, r.from}, {DNNL_ARG_TO, between}}, where);
    convert_all(buffer.data<float>());
  }
}

void Execution::run(const dnnl::primitive& p, CallSite where) {
  for (const Pending& r : before_) reorder(r, Direction::input, where);
  execute(p, args_, where);
  for (const Pending& r : after_) reorder(r, Direction::output, where);
}

namespace {
// True when t's elements fill numel() consecutive slots from its first
// element in some order of its dims (a transpose of a contiguous tensor).
bool dense_permutation(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, extent) of extents above 1
  for (int d = 0; d < t.ndim(); ++d)
    if (t.shape()[d] != 1) dims.emplace_back(t.strides()[d], t.shape()[d]);
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, extent] : dims) {
    if (stride != expected) return false;
    expected *= extent;
  }
  return true;
}
}  // namespace

Tensor to_float32(const Tensor& t) {
  if (t.dtype() == DType::float32 && t.is_contiguous()) return t;
  if (t.numel() > 0 && dense_permutation(t)) {
    // One bulk conversion of the element range; the copy keeps t's layout
    // (a transposed weight stays transposed), which matmul reads as it is.
    const Shape flat{t.numel()}, unit{1};
    Tensor out = empty(flat, DType::float32, t.device());
    copy(view::make(t, flat, unit), out);
    return view::make(out, t.shape(), t.strides(), 0);
  }
  Tensor out = empty(t.shape(), DType::float32, t.device());
  copy(t, out);
  return out;
}

#else

int64_t primitives_created() { return 0; }

#endif  // MIXGRAD_WITH_ONEDNN

}  // namespace mixgrad::backend::onednn
