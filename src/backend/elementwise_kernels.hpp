// The elementwise kernels of both backends, written once: each op's functor
// (kernels/{unary,binary}.hpp) run by the device's map engine over the
// dtypes it has a kernel for, and the op tables that pick it. The tables are
// generated, as the enums of backend/elementwise.hpp are, from
// core/unary_ops.def and core/binary_ops.def, so adding an elementwise
// kernel is one line there. A backend passes its engine, and registers the
// entry points:
//
//   struct CpuMap {
//     static constexpr const char* kDevice = "CPU";  // named in the dtype errors
//     template <class T, class O, int N, class Fn>
//     static void map(const char* op, const Tensor& out, const std::array<Operand, N>& inputs, const Fn& fn);
//   };
//   MIXGRAD_CPU_KERNEL(binary, ElementwiseKernels<CpuMap>::binary);
//
// The functors reach the engine as they are (a unary one through the small
// Forward / Backward adaptors), so each element runs the device's own loop.
// `where` moves stored bits without a functor and stays each backend's own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include "backend/elementwise.hpp"
#include "kernels/binary.hpp"
#include "kernels/cast.hpp"
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

namespace mixgrad::backend {

/// The unsigned integer of kBytes bytes: `where` moves an element as its
/// stored bits, one instantiation per element size, not per dtype.
template <size_t kBytes> struct bits_of;
template <> struct bits_of<1> { using type = uint8_t; };
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };

template <class Device>
struct ElementwiseKernels {
  // The entry points, each an indexed call into its op's table.
  static void unary(UnaryOp op, const Tensor& x, const Tensor& out, const UnaryParams& params) {
    static constexpr auto table = elementwise_tables::unary<UnaryEntry>();
    table[static_cast<size_t>(op)](x, out, params);
  }
  static void unary_grad(UnaryOp op, const Tensor& grad, const Tensor& saved, const Tensor& dx,
                         const UnaryParams& params) {
    static constexpr auto table = elementwise_tables::unary<UnaryGradEntry>();
    table[static_cast<size_t>(op)](grad, saved, dx, params);
  }
  static void binary(BinaryOp op, const Operand& a, const Operand& b, const Tensor& out) {
    static constexpr auto table = elementwise_tables::table<BinaryEntry>(elementwise_tables::binary_functors);
    table[static_cast<size_t>(op)](a, b, out);
  }
  static void binary_grad(BinaryGradOp op, const Tensor& grad, const Operand& x, const Operand& y, const Tensor& dx) {
    static constexpr auto table = elementwise_tables::table<BinaryGradEntry>(elementwise_tables::binary_grad_functors);
    table[static_cast<size_t>(op)](grad, x, y, dx);
  }
  static void compare(CompareOp op, const Operand& a, const Operand& b, const Tensor& out) {
    static constexpr auto table = elementwise_tables::table<CompareEntry>(elementwise_tables::compare_functors);
    table[static_cast<size_t>(op)](a, b, out);
  }

  // Whether functor family F has a kernel for storage type T: floating types
  // always, integers when the op is meaningful on them, bool never.
  template <template <class> class F, class T>
  static constexpr bool has_kernel() {
    if constexpr (std::is_same_v<T, bool>) return false;
    else if constexpr (std::is_integral_v<T>) return F<T>::kIntegers;
    else return true;
  }

  [[noreturn]] static void unsupported(const char* what, DType t) {
    throw DTypeError(std::string(what) + ": no " + Device::kDevice + " kernel for dtype " +
                     std::string(to_string(t)));
  }

  // A unary functor as the engine calls it: its value, and its gradient from
  // the tensor the backward kept. Members of this template, so each device's
  // loops are instantiated with types of its own.
  template <class F, class C>
  struct Forward {
    F f;
    MIXGRAD_HOST_DEVICE C operator()(C v) const { return f(v); }
  };
  template <class F, class C>
  struct Backward {
    F f;
    MIXGRAD_HOST_DEVICE C operator()(C g, C s) const { return f.grad(g, s); }
  };

  // ---- one kernel per functor ----------------------------------------------

  template <template <class> class F>
  static void unary_kernel(const Tensor& x, const Tensor& out, const UnaryParams& params) {
    visit_dtype(out.dtype(), [&]<class T>() {
      if constexpr (has_kernel<F, T>()) {
        using C = kernels::compute_t<T>;
        Device::template map<T, T, 1>("unary", out, {Operand(x)}, Forward<F<C>, C>{kernels::make_unary<F, C>(params)});
      } else {
        unsupported("unary", out.dtype());
      }
    });
  }

  // Floating only, as binary_grad: integer tensors have no gradients (the
  // forward's integer kernels have no backward to serve).
  template <template <class> class F>
  static void unary_grad_kernel(const Tensor& grad, const Tensor& saved, const Tensor& dx, const UnaryParams& params) {
    visit_floating(dx.dtype(), "unary_grad", [&]<class T>() {
      using C = kernels::compute_t<T>;
      Device::template map<T, T, 2>("unary_grad", dx, {Operand(grad), Operand(saved)},
                                    Backward<F<C>, C>{kernels::make_unary<F, C>(params)});
    });
  }

  template <template <class> class F>
  static void binary_kernel(const Operand& a, const Operand& b, const Tensor& out) {
    visit_dtype(out.dtype(), [&]<class T>() {
      if constexpr (has_kernel<F, T>()) {
        Device::template map<T, T, 2>("binary", out, {a, b}, F<kernels::compute_t<T>>{});
      } else {
        unsupported("binary", out.dtype());
      }
    });
  }

  // Gradient functors are floating-only: integer tensors have no gradients.
  template <template <class> class F>
  static void binary_grad_kernel(const Tensor& grad, const Operand& x, const Operand& y, const Tensor& dx) {
    visit_floating(dx.dtype(), "binary_grad", [&]<class T>() {
      Device::template map<T, T, 3>("binary_grad", dx, {Operand(grad), x, y}, F<kernels::compute_t<T>>{});
    });
  }

  // Comparisons run in the operands' dtype (a tensor's; float64 for two scalars).
  static DType operand_dtype(const Operand& a, const Operand& b) {
    if (a.tensor) return a.tensor->dtype();
    if (b.tensor) return b.tensor->dtype();
    return DType::float64;
  }

  template <template <class> class F>
  static void compare_kernel(const Operand& a, const Operand& b, const Tensor& out) {
    visit_dtype(operand_dtype(a, b), [&]<class T>() {
      Device::template map<T, bool, 2>("compare", out, {a, b}, F<kernels::compute_t<T>>{});
    });
  }

  // ---- the table entries: Entry<F>::fn for each functor F ------------------

  template <template <class> class F>
  struct UnaryEntry {
    static constexpr auto fn = &unary_kernel<F>;
  };
  template <template <class> class F>
  struct UnaryGradEntry {
    static constexpr auto fn = &unary_grad_kernel<F>;
  };
  template <template <class> class F>
  struct BinaryEntry {
    static constexpr auto fn = &binary_kernel<F>;
  };
  template <template <class> class F>
  struct BinaryGradEntry {
    static constexpr auto fn = &binary_grad_kernel<F>;
  };
  template <template <class> class F>
  struct CompareEntry {
    static constexpr auto fn = &compare_kernel<F>;
  };
};

}  // namespace mixgrad::backend
