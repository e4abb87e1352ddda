// Which shared functor (src/kernels/) computes each elementwise op, in the
// order of backend/elementwise.hpp's enums. ElementwiseKernels
// (elementwise_kernels.hpp) builds both backends' dispatch tables from these
// lists, each over its device's map engine. The lists are generated, as
// the enums are, from core/unary_ops.def and core/binary_ops.def, so adding
// an elementwise kernel is one line there:
//
//   template <template <class> class F> struct Forward { static constexpr UnaryFn fn = &unary_kernel<F>; };
//   constexpr auto kUnary = elementwise_tables::unary<Forward>();
//   kUnary[static_cast<size_t>(op)](x, out, params);
#pragma once

#include <array>
#include <cstddef>

#include "backend/elementwise.hpp"
#include "kernels/binary.hpp"
#include "kernels/unary.hpp"

namespace mixgrad::backend::elementwise_tables {

template <class Enum, size_t N>
constexpr bool one_per_op() {
  return N == static_cast<size_t>(Enum::kCount);
}

/// Entry<F>::fn for each UnaryOp's functor F.
template <template <template <class> class> class Entry>
constexpr auto unary() {
  using namespace kernels;
  constexpr std::array table{
#define MIXGRAD_UNARY_OP(name, functor, definition, cpu, cuda) Entry<functor>::fn,
#define MIXGRAD_UNARY_KERNEL(name, op, functor) Entry<functor>::fn,
#include "core/unary_ops.def"
#undef MIXGRAD_UNARY_OP
#undef MIXGRAD_UNARY_KERNEL
  };
  static_assert(one_per_op<UnaryOp, table.size()>(), "one functor per UnaryOp, in its order");
  return table;
}

/// Entry<F>::fn for each BinaryOp's functor F, from core/binary_ops.def.
template <template <template <class> class> class Entry>
constexpr auto binary() {
  using namespace kernels;
  return std::array{
#define MIXGRAD_BINARY_OP(name, functor) Entry<functor>::fn,
#include "core/binary_ops.def"
#undef MIXGRAD_BINARY_OP
  };
}

/// Entry<F>::fn for each BinaryGradOp's functor F, from core/binary_ops.def.
template <template <template <class> class> class Entry>
constexpr auto binary_grad() {
  using namespace kernels;
  return std::array{
#define MIXGRAD_BINARY_GRAD_OP(name, functor) Entry<functor>::fn,
#include "core/binary_ops.def"
#undef MIXGRAD_BINARY_GRAD_OP
  };
}

/// Entry<F>::fn for each CompareOp's functor F, from core/binary_ops.def.
template <template <template <class> class> class Entry>
constexpr auto compare() {
  using namespace kernels;
  return std::array{
#define MIXGRAD_COMPARE_OP(name, functor) Entry<functor>::fn,
#include "core/binary_ops.def"
#undef MIXGRAD_COMPARE_OP
  };
}

}  // namespace mixgrad::backend::elementwise_tables
