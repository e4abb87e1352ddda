// The op table as code: OpKind, op names, op families, whether each op's
// gradient is differentiable again and the autocast cast policy per device
// type, all generated from the one list in op_table.def (and unary_ops.def).
// It sits in core/ so that amp/ (which applies the policy) and ops/ (which
// names its op when it asks) both see it without amp/ including ops/.
//
//   mg::op_name(mg::OpKind::conv2d);                                 // "conv2d"
//   mg::amp::cast_policy(mg::OpKind::sum, mg::DeviceType::cuda);     // CastPolicy::high
//   mg::op_from_name("conv2d");                                      // OpKind::conv2d
//   mg::op_gradient(mg::OpKind::argmax);                             // OpGradient::none
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "mixgrad/device.hpp"

namespace mixgrad {

/// Every user-visible op, in the order of op_table.def.
enum class OpKind : uint16_t {
#define MIXGRAD_OP(name, family, gradient, cpu, cuda) name,
#include "core/op_table.def"
#undef MIXGRAD_OP
  kCount
};

inline constexpr std::size_t kOpCount = static_cast<std::size_t>(OpKind::kCount);

/// The group an op belongs to; the op registry's cases files follow it.
enum class OpFamily : uint8_t {
  elementwise, reduction, scan, sorting, linalg, nn, loss, indexing, view, shape, resize
};

/// Whether an op has a gradient, and whether that gradient is differentiable
/// again (docs/autodiff.md, "Twice differentiable ops").
enum class OpGradient : uint8_t {
  twice,  // the backward records itself under create_graph
  once,   // a gradient, but a backward through it throws StateError
  none,   // no gradient (comparisons, argmax)
};

namespace amp {

/// What autocast does with an op's floating inputs.
enum class CastPolicy : uint8_t {
  low,      // cast floating inputs to the low-precision dtype (matmul, conv)
  high,     // cast floating inputs to the high-precision dtype (softmax, losses)
  promote,  // cast floating inputs to the widest of them (add, concat)
  keep,     // run in the inputs' own dtype
};

}  // namespace amp

namespace op_table_detail {

struct Row {
  std::string_view name;
  OpFamily family;
  OpGradient gradient;
  amp::CastPolicy cpu;
  amp::CastPolicy cuda;
};

inline constexpr std::array<Row, kOpCount> kRows = {{
#define MIXGRAD_OP(name, family, gradient, cpu, cuda) \
  {#name, OpFamily::family, OpGradient::gradient, amp::CastPolicy::cpu, amp::CastPolicy::cuda},
#include "core/op_table.def"
#undef MIXGRAD_OP
}};

}  // namespace op_table_detail

/// The op's name as the table spells it ("conv2d").
constexpr std::string_view op_name(OpKind op) { return op_table_detail::kRows[static_cast<std::size_t>(op)].name; }

/// The op's family.
constexpr OpFamily op_family(OpKind op) { return op_table_detail::kRows[static_cast<std::size_t>(op)].family; }

/// Whether the op has a gradient and whether it is differentiable again.
constexpr OpGradient op_gradient(OpKind op) {
  return op_table_detail::kRows[static_cast<std::size_t>(op)].gradient;
}

/// The op named `name`, if the table has one.
constexpr std::optional<OpKind> op_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kOpCount; ++i)
    if (op_table_detail::kRows[i].name == name) return static_cast<OpKind>(i);
  return std::nullopt;
}

namespace amp {

/// `op`'s autocast policy for inputs on a device of type `device`.
constexpr CastPolicy cast_policy(OpKind op, DeviceType device) {
  const auto& row = op_table_detail::kRows[static_cast<std::size_t>(op)];
  return device == DeviceType::cuda ? row.cuda : row.cpu;
}

/// True for the ops whose entry is fixed to keep: views (a cast would copy,
/// and a view shares its input's storage) and astype (autocast's own cast).
/// They do not consult the policy at run time; the table is checked here.
constexpr bool policy_is_fixed(OpKind op) { return op_family(op) == OpFamily::view || op == OpKind::astype; }

static_assert(
    [] {
      for (std::size_t i = 0; i < kOpCount; ++i) {
        const auto op = static_cast<OpKind>(i);
        if (policy_is_fixed(op) && (cast_policy(op, DeviceType::cpu) != CastPolicy::keep ||
                                    cast_policy(op, DeviceType::cuda) != CastPolicy::keep))
          return false;
      }
      return true;
    }(),
    "op_table.def: views and astype must keep their input dtype under autocast");

}  // namespace amp

}  // namespace mixgrad
