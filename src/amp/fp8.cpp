// FP8 regions and delayed scaling (mixgrad/amp/fp8.hpp). A site's product is
// composed of recorded ops, so its gradients follow from theirs:
//
//   y = GradCast(matmul(q(a, s_a), q(b, s_b)) * (1/s_a)(1/s_b))  [+ bias]
//
// q is F::fp8_quantize (E4M3, straight-through), the product runs in float32
// with autocast off, and GradCast is the identity whose backward records the
// gradient's amax and rounds the gradient to E5M2 (HYBRID) with its scale.
// The bias is added after GradCast, so its gradient is the unrounded one (as
// Transformer Engine's fused bias gradient).
//
// Where FP8 GEMMs run (amp/fp8_gemm.hpp), a linear site is instead one node,
// Fp8GemmLinear, whose forward and both gradient products are FP8 GEMMs on
// the codes with the inverse scales; the same arithmetic in exact terms, and
// it keeps the operands as bytes for the backward.
#include "mixgrad/amp/fp8.hpp"

#include <atomic>
#include <cfloat>
#include <cmath>
#include <string>

#include "amp/fp8_gemm.hpp"
#include "backend/copy.hpp"
#include "backend/fp8.hpp"
#include "core/view.hpp"
#include "hooks/fp8_products.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/autodiff/function.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::amp {

/// One product of a region: its kind and its float32 scale [3], amax
/// history [len, 3] and the numerators fp8_max / 2^margin [3].
struct Fp8Scaler::Site {
  enum class Kind { linear, matmul } kind;
  Tensor scale, history, numerator;
};

namespace {

constexpr const char* kKindNames[] = {"F::linear", "F::matmul"};
constexpr int64_t kSlots = 3;  // first operand, second operand, gradient

struct ThreadFp8 {
  Fp8Scaler* scaler = nullptr;
  size_t next_site = 0;
  bool enabled = false;
  int inside_site = 0;  // > 0 while a site runs its own products
};
ThreadFp8& thread_fp8() {
  thread_local ThreadFp8 t;
  return t;
}

Fp8Format grad_format(const Fp8Recipe& r) {
  return r.fp8_format == Fp8Recipe::Format::hybrid ? Fp8Format::e5m2 : Fp8Format::e4m3;
}

void validate(const char* op, const Fp8Recipe& r) {
  if (r.amax_history_len < 1)
    throw ValueError(std::string(op).append(": amax_history_len must be >= 1, got ")
                         .append(std::to_string(r.amax_history_len)));
  if (r.margin < 0 || r.margin > 126)
    throw ValueError(std::string(op).append(": margin must be in [0, 126], got ").append(std::to_string(r.margin)));
}

Tensor numerators(const Fp8Recipe& r, Device device) {
  const double m = std::ldexp(1.0, static_cast<int>(-r.margin));
  const double e4 = fp8_max(Fp8Format::e4m3) * m;
  return tensor(std::vector<float>{static_cast<float>(e4), static_cast<float>(e4),
                                   static_cast<float>(fp8_max(grad_format(r)) * m)},
                Shape{kSlots})
      .to(device);
}

std::shared_ptr<Fp8Scaler::Site> make_site(const Fp8Recipe& r, Fp8Scaler::Site::Kind kind, Device device) {
  auto s = std::make_shared<Fp8Scaler::Site>();
  s->kind = kind;
  s->scale = full(Shape{kSlots}, 1.0, DType::float32, device);
  s->history = zeros(Shape{r.amax_history_len, kSlots}, DType::float32, device);
  s->numerator = numerators(r, device);
  return s;
}

// The site's tensors moved to `device` (a state loaded on another device).
void place(Fp8Scaler::Site& s, Device device) {
  if (s.scale.device() == device) return;
  s.scale = s.scale.to(device);
  s.history = s.history.to(device);
  s.numerator = s.numerator.to(device);
}

// history[0, slot] = max(history[0, slot], amax(|t|)), on the device.
void record_amax(const Fp8Scaler::Site& s, int64_t slot, const Tensor& t) {
  if (t.numel() == 0) return;
  autodiff::NoRecordScope no_record;
  const Tensor cell = s.history.narrow(0, 0, 1).narrow(1, slot, 1);
  const Tensor amax = F::reshape(F::astype(F::max(F::abs(t)), DType::float32), Shape{1, 1});
  backend::copy(F::maximum(cell, amax), cell);
}

Tensor slot_scale(const Fp8Scaler::Site& s, int64_t slot) { return s.scale.narrow(0, slot, 1); }

// The identity, whose backward records the gradient's amax and rounds it.
struct GradCast : autodiff::Function {
  std::shared_ptr<Fp8Scaler::Site> site;
  Fp8Format format;
  GradCast(std::shared_ptr<Fp8Scaler::Site> s, Fp8Format f) : site(std::move(s)), format(f) {
    once_differentiable = true;
  }
  std::string name() const override { return "fp8 gradient cast"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0]}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& dy) override {
    autodiff::NoRecordScope no_record;
    record_amax(*site, 2, dy[0]);
    const Tensor s = slot_scale(*site, 2);
    return {F::mul(F::fp8_quantize(dy[0], s, format), 1.0 / s)};
  }
};

// Claims the region's next site for a product of `kind` on `device`.
std::shared_ptr<Fp8Scaler::Site> next_site(Fp8Scaler& scaler, std::vector<std::shared_ptr<Fp8Scaler::Site>>& sites,
                                           Fp8Scaler::Site::Kind kind, Device device) {
  ThreadFp8& t = thread_fp8();
  const size_t i = t.next_site;
  if (i == sites.size()) sites.push_back(make_site(scaler.recipe(), kind, device));
  Fp8Scaler::Site& s = *sites[i];
  if (s.kind != kind)
    throw StateError(std::string("fp8_autocast: product ").append(std::to_string(i))
                         .append(" of this region is ").append(kKindNames[static_cast<int>(kind)])
                         .append(", but it was ").append(kKindNames[static_cast<int>(s.kind)])
                         .append(" when its scales were made; run the same sequence of products in every step"));
  place(s, device);
  ++t.next_site;
  return sites[i];
}

// The dtype a product returns: autocast's low dtype where it is on, else
// the first operand's.
DType output_dtype(const Tensor& a) {
  return detail::autocast_active() ? autocast_dtype(a.device().type()) : a.dtype();
}

class InsideSite {
 public:
  InsideSite() { ++thread_fp8().inside_site; }
  ~InsideSite() { --thread_fp8().inside_site; }
  InsideSite(const InsideSite&) = delete;
  InsideSite& operator=(const InsideSite&) = delete;
};

}  // namespace

/// The private parts fp8.cpp's free functions reach.
struct Fp8Access {
  static std::shared_ptr<Fp8Scaler::Site> claim(Fp8Scaler& s, Fp8Scaler::Site::Kind kind, Device device) {
    return next_site(s, s.sites_, kind, device);
  }
};

namespace {

// y = GradCast(product(q(a), q(b)) / (s_a s_b)): the emulated product.
template <class Product>
Tensor emulated(const std::shared_ptr<Fp8Scaler::Site>& site, Fp8Format grad, const Tensor& a, const Tensor& b,
                Product product) {
  const Tensor sa = slot_scale(*site, 0), sb = slot_scale(*site, 1);
  Tensor inv;
  {
    autodiff::NoRecordScope no_record;
    inv = F::mul(1.0 / sa, 1.0 / sb);
  }
  const Tensor qa = F::fp8_quantize(a, sa, Fp8Format::e4m3), qb = F::fp8_quantize(b, sb, Fp8Format::e4m3);
  const Tensor y = F::mul(product(qa, qb), inv);
  return autodiff::apply(std::make_shared<GradCast>(site, grad), {y})[0];
}

std::atomic<int> gemm_use{static_cast<int>(detail::Fp8GemmUse::automatic)};
std::atomic<int64_t> gemm_calls{0};

kernels::Fp8Params params(Fp8Format f) { return f == Fp8Format::e4m3 ? kernels::kE4M3 : kernels::kE5M2; }

// Whether a linear site of x [..., k] and weight [n, k] takes the FP8 GEMMs:
// cuBLASLt's shapes (every extent of the three products a multiple of 16)
// on a device that has them, or anywhere under Fp8GemmUse::always.
bool takes_gemm(const Tensor& x, const Tensor& w) {
  const auto use = static_cast<detail::Fp8GemmUse>(gemm_use.load(std::memory_order_relaxed));
  const int64_t n = w.shape()[0], k = w.shape()[1], m = k == 0 ? 0 : x.numel() / k;
  if (use == detail::Fp8GemmUse::never || m == 0 || n == 0 || m % 16 != 0 || n % 16 != 0 || k % 16 != 0)
    return false;
  return use == detail::Fp8GemmUse::always ||
         (x.device().is_cuda() && backend::cuda::fp8_gemm_available(x.device().index()));
}

// t's FP8 codes at `scale` ([rows, cols] uint8).
Tensor encode(const Tensor& t, const Tensor& scale, Fp8Format f) {
  Tensor codes = empty(t.shape(), DType::uint8, t.device());
  backend::fp8_encode(t.is_contiguous() ? t : t.contiguous(), codes, scale, params(f));
  return codes;
}

// codes [r, c] as a contiguous [c, r]: a GEMM operand's other orientation.
Tensor transposed(const Tensor& codes) {
  const int64_t r = codes.shape()[0], c = codes.shape()[1];
  Tensor out = empty(Shape{c, r}, DType::uint8, codes.device());
  backend::copy(view::make(codes, Shape{c, r}, Shape{1, c}), out);
  return out;
}

// a [m, k] . b [n, k]^T * a_inv * b_inv, in float32.
Tensor gemm(const Tensor& a, const Tensor& a_inv, Fp8Format af, const Tensor& b, const Tensor& b_inv, Fp8Format bf) {
  Tensor out = empty(Shape{a.shape()[0], b.shape()[0]}, DType::float32, a.device());
  backend::fp8_gemm({a, a_inv, params(af)}, {b, b_inv, params(bf)}, out);
  gemm_calls.fetch_add(1, std::memory_order_relaxed);
  return out;
}

// x [m, k] . w [n, k]^T as three FP8 GEMMs (Transformer Engine's fprop,
// dgrad and wgrad): E4M3 operands, the gradient in the recipe's format with
// its amax recorded and its scale (slot 2) read at the backward, as GradCast.
struct Fp8GemmLinear : autodiff::Function {
  std::shared_ptr<Fp8Scaler::Site> site;
  Fp8Format grad;
  Tensor x_codes, w_codes, x_inv, w_inv;
  Fp8GemmLinear(std::shared_ptr<Fp8Scaler::Site> s, Fp8Format g) : site(std::move(s)), grad(g) {
    once_differentiable = true;
  }
  std::string name() const override { return "fp8 linear (FP8 GEMMs)"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor sx = slot_scale(*site, 0), sw = slot_scale(*site, 1);
    x_inv = 1.0 / sx;
    w_inv = 1.0 / sw;
    x_codes = encode(in[0], sx, Fp8Format::e4m3);
    w_codes = encode(in[1], sw, Fp8Format::e4m3);
    return {gemm(x_codes, x_inv, Fp8Format::e4m3, w_codes, w_inv, Fp8Format::e4m3)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& dy) override {
    autodiff::NoRecordScope no_record;
    record_amax(*site, 2, dy[0]);
    const Tensor sg = slot_scale(*site, 2);
    const Tensor g_inv = 1.0 / sg, g_codes = encode(dy[0], sg, grad);
    const Tensor dx = gemm(g_codes, g_inv, grad, transposed(w_codes), w_inv, Fp8Format::e4m3);
    const Tensor dw = gemm(transposed(g_codes), g_inv, grad, transposed(x_codes), x_inv, Fp8Format::e4m3);
    return {dx, dw};
  }
};

// The linear site through Fp8GemmLinear, on x seen as [m, k].
Tensor through_gemms(const std::shared_ptr<Fp8Scaler::Site>& site, Fp8Format grad, const Tensor& x,
                     const Tensor& w) {
  const int64_t k = w.shape()[1];
  Shape out_shape = x.shape();
  out_shape[out_shape.ndim() - 1] = w.shape()[0];
  const Tensor x2 = F::reshape(x, Shape{x.numel() / k, k});
  return F::reshape(autodiff::apply(std::make_shared<Fp8GemmLinear>(site, grad), {x2, w})[0], out_shape);
}

// A site: emulated or through the FP8 GEMMs, then the bias, as the file comment.
template <class Product>
Tensor fp8_product(Fp8Scaler::Site::Kind kind, const Tensor& a, const Tensor& b, const Tensor& bias,
                   Product product) {
  ThreadFp8& t = thread_fp8();
  const std::shared_ptr<Fp8Scaler::Site> site = Fp8Access::claim(*t.scaler, kind, a.device());
  const DType out_dtype = output_dtype(a);
  InsideSite inside;
  detail::AutocastOff off;
  record_amax(*site, 0, a);
  record_amax(*site, 1, b);
  const Fp8Format grad = grad_format(t.scaler->recipe());
  Tensor out = kind == Fp8Scaler::Site::Kind::linear && takes_gemm(a, b) ? through_gemms(site, grad, a, b)
                                                                          : emulated(site, grad, a, b, product);
  if (bias.defined()) out = F::add(out, F::astype(bias, DType::float32));
  return F::astype(out, out_dtype);
}

}  // namespace

namespace detail {

void set_fp8_gemm_use(Fp8GemmUse use) { gemm_use.store(static_cast<int>(use), std::memory_order_relaxed); }

Fp8GemmUse fp8_gemm_use() { return static_cast<Fp8GemmUse>(gemm_use.load(std::memory_order_relaxed)); }

int64_t fp8_gemm_calls() { return gemm_calls.load(std::memory_order_relaxed); }

bool fp8_active() {
  const ThreadFp8& t = thread_fp8();
  return t.scaler != nullptr && t.enabled && t.inside_site == 0;
}

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return fp8_product(Fp8Scaler::Site::Kind::linear, x, weight, bias,
                     [](const Tensor& qx, const Tensor& qw) { return F::linear(qx, qw); });
}

Tensor fp8_matmul(const Tensor& a, const Tensor& b) {
  return fp8_product(Fp8Scaler::Site::Kind::matmul, a, b, Tensor(),
                     [](const Tensor& qa, const Tensor& qb) { return F::matmul(qa, qb); });
}

}  // namespace detail

// ---------------------------------------------------------------- the scaler

Fp8Scaler::Fp8Scaler(Fp8Recipe recipe) : recipe_(recipe) { validate("Fp8Scaler", recipe_); }

Fp8Scaler::~Fp8Scaler() = default;

void Fp8Scaler::set_amax_reduction(std::function<void(const Tensor&)> reduce) { reduce_ = std::move(reduce); }

size_t Fp8Scaler::num_sites() const { return sites_.size(); }

namespace {
const Fp8Scaler::Site& site_at(const std::vector<std::shared_ptr<Fp8Scaler::Site>>& sites, size_t i) {
  if (i >= sites.size())
    throw ValueError(std::string("Fp8Scaler: site ").append(std::to_string(i)).append(" does not exist (")
                         .append(std::to_string(sites.size())).append(" sites)"));
  return *sites[i];
}
}  // namespace

Tensor Fp8Scaler::scale(size_t site) const { return site_at(sites_, site).scale; }

Tensor Fp8Scaler::amax_history(size_t site) const { return site_at(sites_, site).history; }

namespace {

// The amax each scale is computed from: the history's maximum or row 0.
Tensor history_amax(const Fp8Recipe& r, const Tensor& history) {
  if (r.amax_compute_algo == Fp8Recipe::AmaxCompute::max) return F::max(history, {0});
  return F::reshape(history.narrow(0, 0, 1), Shape{kSlots});
}

// The history rolled by -1 (row 0 to the end) with row 0 zeroed, as
// Transformer Engine's update: [0, h2, ..., h_{L-1}, h0].
Tensor rolled(const Tensor& h) {
  const int64_t len = h.shape()[0];
  std::vector<Tensor> parts{zeros(Shape{1, kSlots}, DType::float32, h.device())};
  if (len > 2) parts.push_back(h.narrow(0, 2, len - 2));
  if (len > 1) parts.push_back(h.narrow(0, 0, 1));
  return parts.size() == 1 ? parts[0] : F::concat(parts, 0);
}

}  // namespace

void Fp8Scaler::update() {
  if (sites_.empty()) return;
  autodiff::NoRecordScope no_record;
  detail::AutocastOff off;
  if (reduce_) {
    std::vector<Tensor> rows;
    for (const auto& s : sites_) rows.push_back(s->history.narrow(0, 0, 1));
    const Tensor current = F::concat(rows, 0);  // [sites, 3], one reduction for all
    reduce_(current);
    for (size_t i = 0; i < sites_.size(); ++i)
      backend::copy(current.narrow(0, static_cast<int64_t>(i), 1), sites_[i]->history.narrow(0, 0, 1));
  }
  for (const auto& s : sites_) {
    const Tensor amax = history_amax(recipe_, s->history);
    const Tensor fresh = F::minimum(F::div(s->numerator, amax), static_cast<double>(FLT_MAX));
    const Tensor kept = F::where(F::le(amax, static_cast<double>(FLT_MAX)), fresh, s->scale);  // NaN, inf: kept
    backend::copy(F::where(F::gt(amax, 0.0), kept, s->scale), s->scale);
    backend::copy(rolled(s->history), s->history);
  }
}

// ---------------------------------------------------------------- checkpoints

namespace {

constexpr const char* kLoad = "Fp8Scaler::load_state_dict";

std::string site_key(size_t i, const char* what) {
  return std::string("site.").append(std::to_string(i)).append(".").append(what);
}

// A one-element entry of a state dict, read on the host (loading is not a step).
double host_value(const StateDict& state, const std::string& key) {
  const Tensor* t = state.find(key);
  if (t == nullptr) throw ValueError(std::string(kLoad).append(": missing key \"").append(key).append("\""));
  if (t->numel() != 1)
    throw ShapeError(std::string(kLoad).append(": \"").append(key).append("\" must hold one element, got ")
                         .append(ops::describe(*t)));
  return t->to(Device::cpu()).item<double>();
}

int64_t choice(const StateDict& state, const std::string& key, int64_t count) {
  const double v = host_value(state, key);
  if (v != std::floor(v) || v < 0 || v >= static_cast<double>(count))
    throw ValueError(std::string(kLoad).append(": \"").append(key).append("\" must be an integer in [0, ")
                         .append(std::to_string(count)).append("), got ").append(std::to_string(v)));
  return static_cast<int64_t>(v);
}

// A float32 tensor of `shape` under `key`, copied.
Tensor site_tensor(const StateDict& state, const std::string& key, const Shape& shape) {
  const Tensor* t = state.find(key);
  if (t == nullptr) throw ValueError(std::string(kLoad).append(": missing key \"").append(key).append("\""));
  if (t->shape() != shape)
    throw ShapeError(std::string(kLoad).append(": \"").append(key).append("\" must have shape ")
                         .append(to_string(shape)).append(", got ").append(ops::describe(*t)));
  if (t->dtype() != DType::float32)
    throw DTypeError(std::string(kLoad).append(": \"").append(key).append("\" must be float32, got ")
                         .append(ops::describe(*t)));
  return t->clone();
}

}  // namespace

StateDict Fp8Scaler::state_dict() const {
  autodiff::NoRecordScope no_record;
  StateDict state;
  state.insert("amax_history_len", scalar(static_cast<double>(recipe_.amax_history_len), DType::int64));
  state.insert("margin", scalar(static_cast<double>(recipe_.margin), DType::int64));
  state.insert("amax_compute_algo", scalar(static_cast<double>(recipe_.amax_compute_algo), DType::int64));
  state.insert("fp8_format", scalar(static_cast<double>(recipe_.fp8_format), DType::int64));
  state.insert("sites", scalar(static_cast<double>(sites_.size()), DType::int64));
  for (size_t i = 0; i < sites_.size(); ++i) {
    state.insert(site_key(i, "kind"), scalar(static_cast<double>(sites_[i]->kind), DType::int64));
    state.insert(site_key(i, "scale"), sites_[i]->scale.clone());
    state.insert(site_key(i, "amax_history"), sites_[i]->history.clone());
  }
  return state;
}

void Fp8Scaler::load_state_dict(const StateDict& state) {
  autodiff::NoRecordScope no_record;
  Fp8Recipe r;
  r.amax_history_len = static_cast<int64_t>(host_value(state, "amax_history_len"));
  r.margin = static_cast<int64_t>(host_value(state, "margin"));
  r.amax_compute_algo = static_cast<Fp8Recipe::AmaxCompute>(choice(state, "amax_compute_algo", 2));
  r.fp8_format = static_cast<Fp8Recipe::Format>(choice(state, "fp8_format", 2));
  validate(kLoad, r);
  const int64_t n = static_cast<int64_t>(host_value(state, "sites"));
  if (n < 0 || static_cast<size_t>(n) * 3 + 5 != state.size())
    throw ValueError(std::string(kLoad).append(": expected 5 recipe entries and 3 per site for ")
                         .append(std::to_string(n)).append(" sites, got ").append(std::to_string(state.size()))
                         .append(" entries"));
  std::vector<std::shared_ptr<Site>> sites;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    auto s = std::make_shared<Site>();
    s->kind = static_cast<Site::Kind>(choice(state, site_key(i, "kind"), 2));
    s->scale = site_tensor(state, site_key(i, "scale"), Shape{kSlots});
    s->history = site_tensor(state, site_key(i, "amax_history"), Shape{r.amax_history_len, kSlots});
    s->numerator = numerators(r, s->scale.device());
    sites.push_back(std::move(s));
  }
  recipe_ = r;
  sites_ = std::move(sites);
}

// ---------------------------------------------------------------- the region

// A region of another scaler than the enclosing one (or of none) numbers its
// sites from 0; a region nested in one of the same scaler, or a disabled
// one, continues the enclosing numbering.
fp8_autocast::fp8_autocast(Fp8Scaler& scaler, bool enabled)
    : saved_scaler_(thread_fp8().scaler), saved_next_(thread_fp8().next_site), saved_enabled_(thread_fp8().enabled) {
  ThreadFp8& t = thread_fp8();
  if (enabled) {
    if (t.scaler != &scaler) t.next_site = 0;
    t.scaler = &scaler;
  }
  t.enabled = enabled;
}

fp8_autocast::~fp8_autocast() {
  ThreadFp8& t = thread_fp8();
  const bool same = t.scaler == saved_scaler_;
  const size_t reached = t.next_site;
  t.scaler = saved_scaler_;
  t.enabled = saved_enabled_;
  t.next_site = same ? reached : saved_next_;
}

}  // namespace mixgrad::amp
