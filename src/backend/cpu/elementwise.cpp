// CPU elementwise kernels: ElementwiseKernels (backend/elementwise_kernels.hpp)
// runs the functors of kernels/{unary,binary}.hpp through the map engine
// (map_loop.hpp); `where` is this file's own loop.
// Kernels here never rely on floating-point exceptions: without trapping
// math GCC may compute both arms of a select (leaky_relu, the gradients of
// maximum / clamp, NaN-propagating max) and vectorise the loop, instead of
// branching per element. Scoped to this file; it precedes the includes so
// the templates instantiated here get it too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <array>
#include <cstdint>
#include <string>

#include "backend/cpu/map_loop.hpp"
#include "backend/elementwise.hpp"
#include "backend/elementwise_kernels.hpp"
#include "kernels/binary.hpp"

namespace mixgrad::backend::cpu {

namespace {

// The map engine as ElementwiseKernels calls it.
struct CpuMap {
  static constexpr const char* kDevice = "CPU";
  template <class T, class O, int N, class Fn>
  static void map(const char* /*op*/, const Tensor& out, const std::array<Operand, N>& inputs, const Fn& fn) {
    detail::map<T, O, N>(out, inputs, fn);
  }
};

using Kernels = ElementwiseKernels<CpuMap>;

// ---- where -----------------------------------------------------------------

// A select moves elements without arithmetic, so it runs on the stored bits
// (an unsigned integer U of the element's size; 16-bit floats are not
// converted). Runs with a contiguous condition and output, and each value
// either contiguous or a broadcast scalar, get a vectorisable loop.
template <class U, bool kScalarA, bool kScalarB>
void select_run(U* o, const bool* c, const U* a, const U* b, int64_t n) {
  const kernels::Select<U> sel;
  for (int64_t i = 0; i < n; ++i) o[i] = sel(c[i], a[kScalarA ? 0 : i], b[kScalarB ? 0 : i]);
}

template <class U>
void where_run(std::array<char*, 4> p, const std::array<int64_t, 4>& st, int64_t n) {
  constexpr int64_t kU = sizeof(U);
  if (st[0] == kU && st[1] == 1 && (st[2] == kU || st[2] == 0) && (st[3] == kU || st[3] == 0)) {
    U* o = reinterpret_cast<U*>(p[0]);
    const bool* c = reinterpret_cast<const bool*>(p[1]);
    const U* a = reinterpret_cast<const U*>(p[2]);
    const U* b = reinterpret_cast<const U*>(p[3]);
    if (st[2] && st[3]) select_run<U, false, false>(o, c, a, b, n);
    else if (st[3]) select_run<U, true, false>(o, c, a, b, n);
    else if (st[2]) select_run<U, false, true>(o, c, a, b, n);
    else select_run<U, true, true>(o, c, a, b, n);
    return;
  }
  const kernels::Select<U> sel;
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<U*>(p[0] + i * st[0]) = sel(*reinterpret_cast<const bool*>(p[1] + i * st[1]),
                                                  *reinterpret_cast<const U*>(p[2] + i * st[2]),
                                                  *reinterpret_cast<const U*>(p[3] + i * st[3]));
}

}  // namespace

void where(const Tensor& cond, const Operand& a, const Operand& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&]<class T>() {
    std::array<T, 2> scalars{};
    std::array<Shape, 4> strides{byte_strides(out), detail::broadcast_byte_strides(cond, out.shape())};
    std::array<char*, 4> base{static_cast<char*>(out.raw_data()), static_cast<char*>(cond.raw_data())};
    const std::array<const Operand*, 2> ab{&a, &b};
    for (int k = 0; k < 2; ++k) {
      if (ab[k]->tensor) {
        strides[k + 2] = detail::broadcast_byte_strides(*ab[k]->tensor, out.shape());
        base[k + 2] = static_cast<char*>(ab[k]->tensor->raw_data());
      } else {
        scalars[k] = kernels::cast<T>(ab[k]->scalar);
        Shape zero = out.shape();
        for (int d = 0; d < zero.ndim(); ++d) zero[d] = 0;
        strides[k + 2] = zero;
        base[k + 2] = reinterpret_cast<char*>(&scalars[k]);
      }
    }
    kernels::for_each_run<4>(out.shape(), strides, base, &where_run<typename bits_of<sizeof(T)>::type>);
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(unary, cpu::Kernels::unary);
MIXGRAD_CPU_KERNEL(unary_grad, cpu::Kernels::unary_grad);
MIXGRAD_CPU_KERNEL(binary, cpu::Kernels::binary);
MIXGRAD_CPU_KERNEL(binary_grad, cpu::Kernels::binary_grad);
MIXGRAD_CPU_KERNEL(compare, cpu::Kernels::compare);
MIXGRAD_CPU_KERNEL(where, cpu::where);

}  // namespace mixgrad::backend
