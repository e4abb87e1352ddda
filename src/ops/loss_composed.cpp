// The losses composed of F:: ops, with PyTorch's argument semantics:
// smooth_l1_loss, huber_loss, binary_cross_entropy, poisson_nll_loss,
// kl_div, soft_margin_loss, margin_ranking_loss, hinge_embedding_loss,
// cosine_embedding_loss, multi_margin_loss, triplet_margin_loss. Each checks its operands and
// arguments first (nothing runs before a throw), applies its own autocast
// entry (float32, PyTorch's fp32 lists), then computes with autocast off so
// that the ops inside do not cast again. Every inner op is differentiable
// (twice, too) and dispatched to the inputs' device, so these need no
// kernels; each reads its inputs a few times more than a fused kernel would.
#include <cmath>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "backend/indexing.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/ops/indexing.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/loss.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

// One call's operands, named for the messages.
struct Call {
  const char* op;
  std::vector<std::pair<const char*, Tensor>> operands;

  template <class E>
  [[noreturn]] void fail(const std::string& why) const {
    std::string s = std::string(op) + ": " + why + " (";
    for (size_t i = 0; i < operands.size(); ++i)
      s += std::string(i ? ", " : "") + operands[i].first + " " + ops::describe(operands[i].second);
    throw E(s + ")");
  }

  // Defined, on one device, floating; with same_shape, all of the first's shape.
  void check(bool same_shape = true) const {
    for (const auto& [name, t] : operands)
      if (!t.defined()) fail<StateError>(std::string(name) + " is undefined");
    for (const auto& [name, t] : operands)
      if (t.device() != operands[0].second.device()) fail<DeviceError>("operands on different devices");
    for (const auto& [name, t] : operands)
      if (!is_floating_point(t.dtype())) fail<DTypeError>(std::string(name) + " must be floating");
    if (same_shape)
      for (const auto& [name, t] : operands)
        if (t.shape() != operands[0].second.shape()) fail<ShapeError>("the operands' shapes differ");
  }

  void check_finite(const char* name, double v) const {
    if (!std::isfinite(v)) fail<ValueError>(std::string(name) + " must be finite, got " + std::to_string(v));
  }

  // The operands after autocast's entry for `kind`, promoted to one dtype.
  std::vector<Tensor> prepared(OpKind kind) const {
    std::vector<Tensor> ts;
    for (const auto& [name, t] : operands) ts.push_back(t);
    amp::autocast_inputs(kind, ts);
    DType common = ts[0].dtype();
    for (const Tensor& t : ts) common = promote_types(common, t.dtype());
    for (Tensor& t : ts)
      if (t.dtype() != common) t = astype(t, common);
    return ts;
  }
};

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.ndim() > to.ndim()) return false;
  for (int i = 1; i <= from.ndim(); ++i)
    if (from[from.ndim() - i] != 1 && from[from.ndim() - i] != to[to.ndim() - i]) return false;
  return true;
}

Tensor reduce(const Tensor& l, Reduction r) {
  switch (r) {
    case Reduction::mean: return mean(l);
    case Reduction::sum: return sum(l);
    case Reduction::none: break;
  }
  return l;
}

// log(t) where t > 0 and 0 elsewhere, with a finite gradient everywhere.
Tensor safe_log(const Tensor& t) { return log(where(gt(t, 0.0), t, ones_like(t))); }

// t log t, 0 where t == 0 (PyTorch's xlogy(t, t)).
Tensor t_log_t(const Tensor& t) { return where(gt(t, 0.0), mul(t, safe_log(t)), zeros_like(t)); }

// Where |d| < beta: 0.5 d^2 / beta, else |d| - 0.5 beta (smooth_l1's).
Tensor smooth_l1(const Tensor& d, double beta) {
  const Tensor ad = abs(d);
  if (beta == 0.0) return ad;
  return where(lt(ad, beta), mul(mul(d, d), 0.5 / beta), sub(ad, 0.5 * beta));
}

}  // namespace

Tensor smooth_l1_loss(const Tensor& pred, const Tensor& target, const SmoothL1LossOptions& o) {
  const Call c{"smooth_l1_loss", {{"input", pred}, {"target", target}}};
  c.check();
  c.check_finite("beta", o.beta);
  if (o.beta < 0) c.fail<ValueError>("beta must be >= 0, got " + std::to_string(o.beta));
  const auto t = c.prepared(OpKind::smooth_l1_loss);
  const amp::detail::AutocastOff composed;
  return reduce(smooth_l1(sub(t[0], t[1]), o.beta), o.reduction);
}

Tensor huber_loss(const Tensor& pred, const Tensor& target, const HuberLossOptions& o) {
  const Call c{"huber_loss", {{"input", pred}, {"target", target}}};
  c.check();
  c.check_finite("delta", o.delta);
  if (!(o.delta > 0)) c.fail<ValueError>("delta must be > 0, got " + std::to_string(o.delta));
  const auto t = c.prepared(OpKind::huber_loss);
  const amp::detail::AutocastOff composed;
  return reduce(mul(smooth_l1(sub(t[0], t[1]), o.delta), o.delta), o.reduction);
}

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, const BinaryCrossEntropyOptions& o) {
  Call c{"binary_cross_entropy", {{"input", probs}, {"target", target}}};
  c.check();
  if (o.weight.defined()) {
    c.operands.emplace_back("weight", o.weight);
    c.check(false);
    if (!broadcasts_to(o.weight.shape(), probs.shape()))
      c.fail<ShapeError>("weight does not broadcast to the input's shape");
  }
  if (amp::detail::autocast_active() && probs.device().type() == DeviceType::cuda)
    c.fail<StateError>(
        "unsafe to autocast: a sigmoid before it loses precision in 16 bits. Combine the two with "
        "F::binary_cross_entropy_with_logits, which is safe to autocast");
  const auto t = c.prepared(OpKind::binary_cross_entropy);
  const amp::detail::AutocastOff composed;
  const Tensor &p = t[0], &y = t[1];
  const Tensor log_p = maximum(log(p), -100.0), log_1mp = maximum(log(sub(1.0, p)), -100.0);
  Tensor l = neg(add(mul(y, log_p), mul(sub(1.0, y), log_1mp)));
  if (o.weight.defined()) l = mul(l, t[2]);
  return reduce(l, o.reduction);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNllLossOptions& o) {
  const Call c{"poisson_nll_loss", {{"input", input}, {"target", target}}};
  c.check();
  c.check_finite("eps", o.eps);
  const auto t = c.prepared(OpKind::poisson_nll_loss);
  const amp::detail::AutocastOff composed;
  const Tensor &x = t[0], &y = t[1];
  Tensor l = o.log_input ? sub(exp(x), mul(y, x)) : sub(x, mul(y, log(add(x, o.eps))));
  if (o.full) {  // Stirling's approximation of log(y!), where y > 1
    const Tensor y_safe = where(gt(y, 1.0), y, ones_like(y));
    const Tensor stirling = add(sub(t_log_t(y_safe), y_safe), mul(log(mul(y_safe, 2.0 * std::numbers::pi)), 0.5));
    l = add(l, where(gt(y, 1.0), stirling, zeros_like(y)));
  }
  return reduce(l, o.reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivOptions& o) {
  const Call c{"kl_div", {{"input", input}, {"target", target}}};
  c.check();
  if (o.batchmean && input.ndim() == 0) c.fail<ShapeError>("batchmean needs a batch dim");
  const auto t = c.prepared(OpKind::kl_div);
  const amp::detail::AutocastOff composed;
  const Tensor &x = t[0], &y = t[1];
  const Tensor l = o.log_target ? mul(exp(y), sub(y, x)) : sub(t_log_t(y), mul(y, x));
  if (o.batchmean) return div(sum(l), static_cast<double>(std::max<int64_t>(x.size(0), 1)));
  return reduce(l, o.reduction);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, const LossOptions& o) {
  const Call c{"soft_margin_loss", {{"input", input}, {"target", target}}};
  c.check();
  const auto t = c.prepared(OpKind::soft_margin_loss);
  const amp::detail::AutocastOff composed;
  return reduce(softplus(neg(mul(t[1], t[0]))), o.reduction);
}

Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, const MarginLossOptions& o) {
  const Call c{"margin_ranking_loss", {{"input1", x1}, {"input2", x2}, {"target", target}}};
  c.check();
  c.check_finite("margin", o.margin);
  const auto t = c.prepared(OpKind::margin_ranking_loss);
  const amp::detail::AutocastOff composed;
  return reduce(relu(add(mul(neg(t[2]), sub(t[0], t[1])), o.margin)), o.reduction);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, const HingeEmbeddingLossOptions& o) {
  const Call c{"hinge_embedding_loss", {{"input", input}, {"target", target}}};
  c.check();
  c.check_finite("margin", o.margin);
  const auto t = c.prepared(OpKind::hinge_embedding_loss);
  const amp::detail::AutocastOff composed;
  const Tensor &x = t[0], &y = t[1], zero = zeros_like(x);
  // PyTorch's: the margin term where y != 1, x itself where y != -1.
  const Tensor margin_part = where(ne(y, 1.0), relu(sub(o.margin, x)), zero);
  return reduce(add(margin_part, where(ne(y, -1.0), x, zero)), o.reduction);
}

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, const MarginLossOptions& o) {
  const Call c{"cosine_embedding_loss", {{"input1", x1}, {"input2", x2}, {"target", target}}};
  c.check(false);
  c.check_finite("margin", o.margin);
  if (x1.shape() != x2.shape() || (x1.ndim() != 1 && x1.ndim() != 2))
    c.fail<ShapeError>("input1 and input2 must be one shape, [N, D] or [D]");
  if (target.ndim() != x1.ndim() - 1 || (x1.ndim() == 2 && target.size(0) != x1.size(0)))
    c.fail<ShapeError>("target must be [N] for [N, D] inputs, 0-d for [D]");
  const auto t = c.prepared(OpKind::cosine_embedding_loss);
  const amp::detail::AutocastOff composed;
  const Tensor &a = t[0], &b = t[1], &y = t[2];
  constexpr double kEps = 1e-12;  // PyTorch's EPSILON in each squared norm
  const Tensor norms = mul(add(sum(mul(a, a), {-1}), kEps), add(sum(mul(b, b), {-1}), kEps));
  const Tensor cos = div(sum(mul(a, b), {-1}), sqrt(norms));
  const Tensor zero = zeros_like(cos);
  const Tensor pos = where(eq(y, 1.0), sub(1.0, cos), zero);
  const Tensor neg_part = where(eq(y, -1.0), relu(sub(cos, o.margin)), zero);
  return reduce(add(pos, neg_part), o.reduction);
}

namespace {

void check_multi_margin(const Tensor& input, const Tensor& target, const MultiMarginLossOptions& o) {
  Call c{"multi_margin_loss", {{"input", input}, {"target", target}}};
  if (o.weight.defined()) c.operands.emplace_back("weight", o.weight);
  for (const auto& [name, t] : c.operands)
    if (!t.defined()) c.fail<StateError>(std::string(name) + " is undefined");
  for (const auto& [name, t] : c.operands)
    if (t.device() != input.device()) c.fail<DeviceError>("operands on different devices");
  if (!is_floating_point(input.dtype()) || (o.weight.defined() && !is_floating_point(o.weight.dtype())))
    c.fail<DTypeError>("input and weight must be floating");
  if (target.dtype() != DType::int64 && target.dtype() != DType::int32)
    c.fail<DTypeError>("target must hold int32 or int64 labels");
  if ((input.ndim() != 1 && input.ndim() != 2) || target.ndim() != input.ndim() - 1 ||
      (input.ndim() == 2 && target.size(0) != input.size(0)))
    c.fail<ShapeError>("expected input [N, C] with target [N], or input [C] with a 0-d target");
  if (o.weight.defined() && (o.weight.ndim() != 1 || o.weight.size(0) != input.size(-1)))
    c.fail<ShapeError>("weight must be [C]");
  if (o.p != 1 && o.p != 2) c.fail<ValueError>("p must be 1 or 2, got " + std::to_string(o.p));
  c.check_finite("margin", o.margin);
}

}  // namespace

Tensor multi_margin_loss(const Tensor& input, const Tensor& target, const MultiMarginLossOptions& o) {
  check_multi_margin(input, target, o);
  const int64_t C = input.size(-1), N = input.ndim() == 2 ? input.size(0) : 1;
  const Tensor labels = ops::dense(target, DType::int64);
  backend::check_indices("multi_margin_loss", labels, C, "the " + std::to_string(C) + " classes of " +
                                                             ops::describe(input));
  std::vector<Tensor> t{input};
  if (o.weight.defined()) t.push_back(o.weight);
  amp::autocast_inputs(OpKind::multi_margin_loss, t);
  const amp::detail::AutocastOff composed;
  if (t.size() == 2 && t[1].dtype() != t[0].dtype()) t[1] = astype(t[1], t[0].dtype());
  const Tensor x = reshape(t[0], Shape{N, C}), y = reshape(labels, Shape{N, 1});
  const Tensor z = relu(add(sub(x, gather(x, 1, y)), o.margin));  // [N, C]
  const Tensor others = ne(reshape(arange(C, DType::int64, x.device()), Shape{1, C}), y);
  Tensor h = where(others, o.p == 2 ? mul(z, z) : z, zeros_like(z));
  if (t.size() == 2) h = mul(h, reshape(index_select(t[1], 0, reshape(labels, Shape{N})), Shape{N, 1}));
  const Tensor l = div(sum(h, {1}), static_cast<double>(C));
  return reduce(input.ndim() == 1 ? reshape(l, Shape{}) : l, o.reduction);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossOptions& o) {
  const Call c{"triplet_margin_loss", {{"anchor", anchor}, {"positive", positive}, {"negative", negative}}};
  c.check();
  if (anchor.ndim() != 1 && anchor.ndim() != 2) c.fail<ShapeError>("the operands must be [N, D] or [D]");
  c.check_finite("margin", o.margin);
  c.check_finite("eps", o.eps);
  if (!(o.p > 0) || !std::isfinite(o.p)) c.fail<ValueError>("p must be finite and > 0, got " + std::to_string(o.p));
  const auto t = c.prepared(OpKind::triplet_margin_loss);
  const amp::detail::AutocastOff composed;
  auto dist = [&o](const Tensor& x, const Tensor& y) { return norm(add(sub(x, y), o.eps), o.p, {-1}); };
  Tensor d_neg = dist(t[0], t[2]);
  if (o.swap) d_neg = minimum(d_neg, dist(t[1], t[2]));
  return reduce(relu(add(sub(dist(t[0], t[1]), d_neg), o.margin)), o.reduction);
}

}  // namespace mixgrad::F
