// Which shared functor (src/kernels/) computes each elementwise op, in the
// order of backend/elementwise.hpp's enums. ElementwiseKernels
// (elementwise_kernels.hpp) builds both backends' dispatch tables from these
// lists, each over its device's map engine. The lists are generated, as
// the enums are, from core/unary_ops.def and core/binary_ops.def, so adding
// an elementwise kernel is one line there:
//
//   template <template <class> class F> struct Forward { static constexpr auto fn = &unary_kernel<F>; };
//   constexpr auto kUnary = elementwise_tables::unary<Forward>();
//   kUnary[static_cast<size_t>(op)](x, out, params);
#pragma once

#include <array>
#include <cstddef>
#include <tuple>

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

/// A functor family (a class template over the element type) as a value.
template <template <class> class F>
struct Functor {};

/// Entry<F>::fn for each functor family F of a list.
template <template <template <class> class> class Entry, template <class> class... F>
constexpr auto table(std::tuple<Functor<F>...>) {
  return std::array{Entry<F>::fn...};
}

/// The functors of the BinaryOps, BinaryGradOps and CompareOps, in their
/// order, from core/binary_ops.def.
#define MIXGRAD_BINARY_OP(name, functor) Functor<kernels::functor>{},
inline constexpr std::tuple binary_functors{
#include "core/binary_ops.def"
};
#undef MIXGRAD_BINARY_OP
#define MIXGRAD_BINARY_GRAD_OP(name, functor) Functor<kernels::functor>{},
inline constexpr std::tuple binary_grad_functors{
#include "core/binary_ops.def"
};
#undef MIXGRAD_BINARY_GRAD_OP
#define MIXGRAD_COMPARE_OP(name, functor) Functor<kernels::functor>{},
inline constexpr std::tuple compare_functors{
#include "core/binary_ops.def"
};
#undef MIXGRAD_COMPARE_OP

static_assert(one_per_op<BinaryOp, std::tuple_size_v<decltype(binary_functors)>>());
static_assert(one_per_op<BinaryGradOp, std::tuple_size_v<decltype(binary_grad_functors)>>());
static_assert(one_per_op<CompareOp, std::tuple_size_v<decltype(compare_functors)>>());

}  // namespace mixgrad::backend::elementwise_tables
