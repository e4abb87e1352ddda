// The one registration list every op is tested from (see
// test_op_registry.cpp): its gradient against central finite differences in
// float64, its result on one device and dtype against another (float16 /
// bfloat16 against float32 on the CPU; CUDA against the CPU where a device
// is present), and that it reads its autocast entry in the op table.
//
// Every op of the op table (src/core/op_table.def) has cases: its family's
// cases_*.cpp specializes cases_of<OpKind::op>(). family_cases() asks for the
// cases of every op of a family, so an op added to the table without cases
// does not compile (the static_assert in the primary template below). A case
// says how to build inputs and how to run the op:
//
//   template <> Cases cases_of<mg::OpKind::mul>() {
//     return {{.name = "mul_broadcast",
//              .inputs = {{3, 4}, {4}},
//              .run = [](const Inputs& x) { return mg::F::mul(x[0], x[1]); }}};
//   }
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/op_table.hpp"
#include "mixgrad/mixgrad.hpp"

namespace optest {

namespace mg = mixgrad;
using Inputs = std::vector<mg::Tensor>;

struct InputSpec {
  mg::Shape shape;
  /// Builds the input in `dtype` (floating inputs) from a seed; empty means
  /// uniform in [low, high). Integer inputs (labels) ignore `dtype`.
  std::function<mg::Tensor(mg::DType dtype)> make = nullptr;
  double low = -1.0;
  double high = 1.0;
  /// Checked by finite differences (floating inputs only).
  bool differentiable = true;
  InputSpec(mg::Shape s) : shape(s) {}  // NOLINT(google-explicit-constructor)
  InputSpec(std::initializer_list<int64_t> s) : shape(s) {}
  InputSpec(mg::Shape s, double lo, double hi) : shape(s), low(lo), high(hi) {}
  InputSpec(mg::Shape s, std::function<mg::Tensor(mg::DType)> m, bool diff = false)
      : shape(s), make(std::move(m)), differentiable(diff) {}
};

struct OpCase {
  std::string name;
  /// The op under test (set by family_cases from the cases_of<> it came from).
  mg::OpKind op = mg::OpKind::kCount;
  std::vector<InputSpec> inputs;
  std::function<mg::Tensor(const Inputs&)> run;
  /// Multiplies the per-dtype tolerance of the low-precision check (ops
  /// with long reductions, e.g. a conv over many channels, need more).
  double lowp_tolerance = 1.0;
  /// False for ops whose low-precision run is not meaningful (integer output).
  bool check_low_precision = true;
  /// False for ops without a gradient (comparisons, argmax).
  bool check_gradient = true;
  /// False where devices may rightly differ (dropout: each device's own
  /// random generator draws the mask).
  bool same_on_every_device = true;
  /// False where the case's result does not come from its op's autocast
  /// (sum_to: it reduces broadcast gradients, and autocast never casts it).
  bool reads_autocast_entry = true;
  /// Finite-difference step and tolerance (float64).
  double eps = 1e-6;
  double grad_tolerance = 1e-5;
  /// Overrides the op's twice_differentiable() for this case (norm's
  /// infinity norm, say, where the op's other cases are).
  std::optional<bool> twice_differentiable;
};

using Cases = std::vector<OpCase>;

template <mg::OpKind>
inline constexpr bool kHasNoCases = false;

/// The cases of one op, specialized in its family's cases_*.cpp.
template <mg::OpKind K>
Cases cases_of() {
  static_assert(kHasNoCases<K>,
                "an op of src/core/op_table.def has no case in the op registry: specialize "
                "optest::cases_of<OpKind::...>() in its family's tests/ops/cases_*.cpp");
  return {};
}

namespace detail {
template <mg::OpFamily F, std::size_t... I>
Cases collect(std::index_sequence<I...>) {
  Cases all;
  (
      [&] {
        constexpr auto k = static_cast<mg::OpKind>(I);
        if constexpr (mg::op_family(k) == F) {
          for (OpCase c : cases_of<k>()) {
            c.op = k;
            all.push_back(std::move(c));
          }
        }
      }(),
      ...);
  return all;
}
}  // namespace detail

/// The cases of every op of family F, each tagged with its op. Instantiated
/// in the family's cases file, after its cases_of<> specializations.
template <mg::OpFamily F>
Cases family_cases() {
  return detail::collect<F>(std::make_index_sequence<mg::kOpCount>{});
}

// One function per op family, each in its own cases_*.cpp.
std::vector<OpCase> elementwise_cases();
std::vector<OpCase> reduction_cases();
std::vector<OpCase> scan_cases();
std::vector<OpCase> linalg_cases();
std::vector<OpCase> nn_cases();
std::vector<OpCase> loss_cases();
std::vector<OpCase> indexing_cases();
std::vector<OpCase> shape_cases();  // views and shape ops
std::vector<OpCase> resize_cases();
std::vector<OpCase> sorting_cases();

/// Whether an op's gradient can be differentiated again (its backward
/// closure records itself under create_graph; docs/autodiff.md lists them):
/// the gradient column of the op table (src/core/op_table.def, OpGradient),
/// so every op has an answer. The registry holds each op to it: twice
/// differentiable ops have their second derivatives checked against finite
/// differences of the gradient, once differentiable ops must refuse
/// (StateError) a backward through their recorded gradient, and ops without
/// a gradient have no gradient check.
enum class SecondOrder { twice_differentiable, not_twice_differentiable, no_gradient };

constexpr SecondOrder second_order(mg::OpKind op) {
  switch (mg::op_gradient(op)) {
    case mg::OpGradient::twice: return SecondOrder::twice_differentiable;
    case mg::OpGradient::once: return SecondOrder::not_twice_differentiable;
    case mg::OpGradient::none: break;
  }
  return SecondOrder::no_gradient;
}

/// Whether case c's gradient is checked for second derivatives.
inline bool twice_differentiable(const OpCase& c) {
  return c.twice_differentiable.value_or(second_order(c.op) == SecondOrder::twice_differentiable);
}

/// The op the run is limited to (`test_ops --op conv2d`), if any.
inline std::optional<mg::OpKind>& op_filter() {
  static std::optional<mg::OpKind> op;
  return op;
}

inline std::vector<OpCase> all_op_cases() {
  std::vector<OpCase> all;
  for (auto family : {elementwise_cases, reduction_cases, scan_cases, sorting_cases, linalg_cases, nn_cases,
                      loss_cases, indexing_cases, shape_cases, resize_cases}) {
    for (OpCase& c : family())
      if (!op_filter() || c.op == *op_filter()) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace optest
