// Which shared functor (src/kernels/) computes each elementwise op, in the
// order of backend/elementwise.hpp's enums. ElementwiseKernels
// (elementwise_kernels.hpp) builds both backends' dispatch tables from these
// lists, each over its device's map engine. The unary list is generated from core/unary_ops.def, as the
// UnaryOp enum is, so adding a unary op is one line there; the binary lists
// are written here (a compile error in each backend until enum and list agree):
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

/// Entry<F>::fn for each BinaryOp's functor F.
template <template <template <class> class> class Entry>
constexpr auto binary() {
  using namespace kernels;
  constexpr std::array table{Entry<Add>::fn, Entry<Sub>::fn,     Entry<Mul>::fn,    Entry<Div>::fn,
                             Entry<Pow>::fn, Entry<Maximum>::fn, Entry<Minimum>::fn};
  static_assert(one_per_op<BinaryOp, table.size()>(), "one functor per BinaryOp, in its order");
  return table;
}

/// Entry<F>::fn for each BinaryGradOp's functor F.
template <template <template <class> class> class Entry>
constexpr auto binary_grad() {
  using namespace kernels;
  constexpr std::array table{Entry<DivGradDivisor>::fn, Entry<PowGradBase>::fn, Entry<PowGradExponent>::fn,
                             Entry<MaximumGrad>::fn, Entry<MinimumGrad>::fn};
  static_assert(one_per_op<BinaryGradOp, table.size()>(), "one functor per BinaryGradOp, in its order");
  return table;
}

/// Entry<F>::fn for each CompareOp's functor F.
template <template <template <class> class> class Entry>
constexpr auto compare() {
  using namespace kernels;
  constexpr std::array table{Entry<Equal>::fn,     Entry<NotEqual>::fn, Entry<Less>::fn,
                             Entry<LessEqual>::fn, Entry<Greater>::fn,  Entry<GreaterEqual>::fn};
  static_assert(one_per_op<CompareOp, table.size()>(), "one functor per CompareOp, in its order");
  return table;
}

}  // namespace mixgrad::backend::elementwise_tables
