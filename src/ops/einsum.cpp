// F::einsum, as torch.einsum, composed of F:: ops: the equation is parsed
// into one label per operand dim ("..." dims get labels of their own, right
// aligned across operands), a label repeated in one operand becomes that
// operand's diagonal (index_select on the flattened pair of dims), labels no
// other operand and not the output need are summed at once, and operands are
// contracted left to right, each pair as one batched matmul of
// [batch, left, contracted] x [batch, contracted, right] (PyTorch's
// sumproduct_pair). Every step is a tracked F:: op, so the result is
// differentiable twice; autocast applies einsum's entry (low precision) and
// the parts run with autocast off.
#include "mixgrad/ops/einsum.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/indexing.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

constexpr const char* kOp = "einsum";
constexpr int kLetters = 52;  // a-z then A-Z; "..." dims take labels from here on

struct Equation {
  std::vector<std::vector<int>> inputs;  // labels per operand dim
  std::vector<int> output;
};

std::string describe_all(std::string_view eq, const std::vector<Tensor>& ops) {
  std::string s = " (equation \"" + std::string(eq) + "\"";
  for (size_t i = 0; i < ops.size(); ++i) s += ", operand " + std::to_string(i) + " " + ops::describe(ops[i]);
  return s + ")";
}

struct Context {
  std::string_view eq;
  const std::vector<Tensor>& operands;
  template <class E = ValueError>
  [[noreturn]] void fail(const std::string& why) const {
    throw E(std::string(kOp) + ": " + why + describe_all(eq, operands));
  }
};

int letter_label(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -1;
}

// One term ("ab...c"): its letters' labels, with -1 where "..." stands.
std::vector<int> parse_term(std::string_view term, const Context& ctx) {
  std::vector<int> out;
  bool ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      if (ellipsis || term.substr(i, 3) != "...") ctx.fail("'.' is allowed only in one \"...\" per term");
      ellipsis = true;
      out.push_back(-1);
      i += 2;
      continue;
    }
    const int l = letter_label(term[i]);
    if (l < 0) ctx.fail(std::string("'") + term[i] + "' is not a subscript (letters a-z, A-Z)");
    out.push_back(l);
  }
  return out;
}

std::vector<std::string_view> split_terms(std::string_view lhs) {
  std::vector<std::string_view> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return terms;
    start = comma + 1;
  }
}

// Replaces each term's "..." by labels kLetters + k, right aligned over the
// widest "...": operand dims then match labels one to one.
int expand_ellipses(std::vector<std::vector<int>>& terms, const Context& ctx) {
  int ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const bool has = std::count(terms[i].begin(), terms[i].end(), -1) > 0;
    const int letters = static_cast<int>(terms[i].size()) - (has ? 1 : 0);
    const int nd = ctx.operands[i].ndim();
    if (has ? nd < letters : nd != letters)
      ctx.fail<ValueError>("operand " + std::to_string(i) + " has " + std::to_string(nd) + " dims, its term " +
                           std::to_string(letters) + " subscripts" + (has ? " and \"...\"" : ""));
    if (has) ell = std::max(ell, nd - letters);
  }
  for (size_t i = 0; i < terms.size(); ++i) {
    const auto at = std::find(terms[i].begin(), terms[i].end(), -1);
    if (at == terms[i].end()) continue;
    const int n = ctx.operands[i].ndim() - (static_cast<int>(terms[i].size()) - 1);
    std::vector<int> labels;
    for (int k = ell - n; k < ell; ++k) labels.push_back(kLetters + k);
    const auto pos = terms[i].erase(at);
    terms[i].insert(pos, labels.begin(), labels.end());
  }
  return ell;
}

Equation parse(const Context& ctx) {
  std::string eq;
  for (char c : ctx.eq)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string_view lhs = std::string_view(eq).substr(0, arrow);
  if (lhs.find('-') != std::string_view::npos || lhs.find('>') != std::string_view::npos)
    ctx.fail("'-' and '>' are allowed only in one \"->\"");
  const auto terms = split_terms(lhs);
  if (terms.size() != ctx.operands.size())
    ctx.fail("the equation has " + std::to_string(terms.size()) + " input terms for " +
             std::to_string(ctx.operands.size()) + " operands");
  Equation e;
  for (auto t : terms) e.inputs.push_back(parse_term(t, ctx));
  std::vector<std::vector<int>> all = e.inputs;
  if (arrow != std::string::npos) all.push_back(parse_term(std::string_view(eq).substr(arrow + 2), ctx));
  const int ell = expand_ellipses(e.inputs, ctx);
  if (arrow != std::string::npos) {
    for (int l : all.back()) {
      if (l == -1) {
        for (int k = 0; k < ell; ++k) e.output.push_back(kLetters + k);
        continue;
      }
      if (std::count(all.back().begin(), all.back().end(), l) > 1) ctx.fail("a subscript repeats in the output");
      bool found = false;
      for (const auto& in : e.inputs) found = found || std::count(in.begin(), in.end(), l) > 0;
      if (!found) ctx.fail("an output subscript is in no input term");
      e.output.push_back(l);
    }
    return e;
  }
  // Implicit output: the "..." dims, then the letters that occur once, sorted.
  std::array<int, kLetters> count{};
  for (const auto& in : e.inputs)
    for (int l : in)
      if (l < kLetters) ++count[static_cast<size_t>(l)];
  for (int k = 0; k < ell; ++k) e.output.push_back(kLetters + k);
  for (int l = 0; l < kLetters; ++l)
    if (count[static_cast<size_t>(l)] == 1) e.output.push_back(l);
  return e;
}

// An operand with one label per dim.
struct Term {
  Tensor t;
  std::vector<int> labels;
};

int position(const std::vector<int>& v, int l) {
  const auto at = std::find(v.begin(), v.end(), l);
  return at == v.end() ? -1 : static_cast<int>(at - v.begin());
}

// The diagonal over dims i < j of equal size n: dim j removed, dim i kept.
Tensor diagonal(const Tensor& x, int i, int j) {
  std::vector<int> order;
  for (int d = 0; d < x.ndim(); ++d)
    if (d != i && d != j) order.push_back(d);
  order.push_back(i);
  order.push_back(j);
  const int64_t n = x.size(i);
  Shape flat = permute(x, order).shape();
  flat.erase(flat.ndim() - 1);
  flat[flat.ndim() - 1] = n * n;
  std::vector<int64_t> at(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) at[static_cast<size_t>(k)] = k * (n + 1);
  const Tensor steps = tensor(at, Shape{n}).to(x.device());
  const Tensor d = index_select(reshape(permute(x, order), flat), flat.ndim() - 1, steps);
  // Move the diagonal back to where dim i was.
  std::vector<int> back;
  for (int k = 0; k < d.ndim() - 1; ++k) back.push_back(k);
  back.insert(back.begin() + i, d.ndim() - 1);
  return permute(d, back);
}

void take_diagonals(Term& term, const Context& ctx) {
  for (int i = 0; i < static_cast<int>(term.labels.size()); ++i) {
    for (int j = static_cast<int>(term.labels.size()) - 1; j > i; --j) {
      if (term.labels[static_cast<size_t>(j)] != term.labels[static_cast<size_t>(i)]) continue;
      if (term.t.size(i) != term.t.size(j)) ctx.fail("a repeated subscript's dims differ in size");
      term.t = diagonal(term.t, i, j);
      term.labels.erase(term.labels.begin() + j);
    }
  }
}

// Sums the dims whose labels neither the output nor another operand needs.
void sum_unneeded(Term& term, const std::vector<int>& needed) {
  std::vector<int> axes;
  std::vector<int> kept;
  for (int d = 0; d < static_cast<int>(term.labels.size()); ++d) {
    if (position(needed, term.labels[static_cast<size_t>(d)]) < 0)
      axes.push_back(d);
    else
      kept.push_back(term.labels[static_cast<size_t>(d)]);
  }
  if (axes.empty()) return;
  term.t = sum(term.t, Axes(axes));
  term.labels = kept;
}

// Broadcasts a size-1 dim of one operand to the other's size for a shared label.
void match_sizes(Term& a, Term& b, const Context& ctx) {
  Shape sa = a.t.shape(), sb = b.t.shape();
  for (size_t i = 0; i < a.labels.size(); ++i) {
    const int j = position(b.labels, a.labels[i]);
    if (j < 0 || sa[static_cast<int>(i)] == sb[j]) continue;
    if (sa[static_cast<int>(i)] != 1 && sb[j] != 1) ctx.fail("a subscript's dims differ in size across operands");
    const int64_t n = std::max(sa[static_cast<int>(i)], sb[j]);
    sa[static_cast<int>(i)] = n;
    sb[j] = n;
  }
  if (sa != a.t.shape()) a.t = broadcast_to(a.t, sa);
  if (sb != b.t.shape()) b.t = broadcast_to(b.t, sb);
}

// a ⊙ b summed over `contracted`: one matmul of [B, L, C] x [B, C, R].
Term contract(Term a, Term b, const std::vector<int>& needed, const Context& ctx) {
  match_sizes(a, b, ctx);
  std::vector<int> batch, left, summed, right;
  for (int l : a.labels) {
    if (position(b.labels, l) < 0)
      left.push_back(l);
    else
      (position(needed, l) >= 0 ? batch : summed).push_back(l);
  }
  for (int l : b.labels)
    if (position(a.labels, l) < 0) right.push_back(l);
  auto extent = [](const Term& t, const std::vector<int>& ls) {
    int64_t n = 1;
    for (int l : ls) n *= t.t.size(position(t.labels, l));
    return n;
  };
  auto arranged = [](const Term& t, std::initializer_list<const std::vector<int>*> groups) {
    std::vector<int> order;
    for (const auto* g : groups)
      for (int l : *g) order.push_back(position(t.labels, l));
    return permute(t.t, order);
  };
  const int64_t B = extent(a, batch), L = extent(a, left), C = extent(a, summed), R = extent(b, right);
  const Tensor lhs = reshape(arranged(a, {&batch, &left, &summed}), Shape{B, L, C});
  const Tensor rhs = reshape(arranged(b, {&batch, &summed, &right}), Shape{B, C, R});
  Term out;
  std::vector<int64_t> shape;
  for (const auto* g : {&batch, &left}) {
    for (int l : *g) {
      out.labels.push_back(l);
      shape.push_back(a.t.size(position(a.labels, l)));
    }
  }
  for (int l : right) {
    out.labels.push_back(l);
    shape.push_back(b.t.size(position(b.labels, l)));
  }
  out.t = reshape(matmul(lhs, rhs), Shape(shape));
  return out;
}

void check_operands(const Context& ctx) {
  if (ctx.operands.empty()) ctx.fail("needs at least one operand");
  std::vector<const Tensor*> ts;
  for (const Tensor& t : ctx.operands) ts.push_back(&t);
  for (const Tensor* t : ts) ops::check_defined(kOp, {t});
  for (const Tensor* t : ts) {
    ops::check_same_device(kOp, {ts.front(), t});
    if (!is_floating_point(t->dtype())) ctx.fail<DTypeError>("every operand must be floating");
    if (t->dtype() != ts.front()->dtype() && !amp::detail::autocast_active())
      ctx.fail<DTypeError>("the operands' dtypes differ");
  }
}

// The labels needed after operand `next`: the output's and those of the
// operands from `next` on.
std::vector<int> needed_after(const std::vector<Term>& terms, size_t next, const std::vector<int>& output) {
  std::vector<int> needed = output;
  for (size_t k = next; k < terms.size(); ++k) needed.insert(needed.end(), terms[k].labels.begin(), terms[k].labels.end());
  return needed;
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands_in) {
  const Context ctx{equation, operands_in};
  check_operands(ctx);
  const Equation e = parse(ctx);
  std::vector<Tensor> operands = operands_in;
  amp::autocast_inputs(OpKind::einsum, operands);
  const amp::detail::AutocastOff composed;
  std::vector<Term> terms;
  for (size_t i = 0; i < operands.size(); ++i) {
    terms.push_back({operands[i], e.inputs[i]});
    take_diagonals(terms.back(), ctx);
  }
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<int> needed = needed_after(terms, i + 1, e.output);
    if (i > 0) needed.insert(needed.end(), terms[0].labels.begin(), terms[0].labels.end());
    sum_unneeded(terms[i], needed);
    if (i > 0) terms[0] = contract(terms[0], terms[i], needed_after(terms, i + 1, e.output), ctx);
  }
  Term& result = terms[0];
  sum_unneeded(result, e.output);
  std::vector<int> order;
  for (int l : e.output) order.push_back(position(result.labels, l));
  return permute(result.t, order);
}

}  // namespace mixgrad::F
