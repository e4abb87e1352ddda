// CPU side of the FP8 cast (backend/fp8.hpp). A contiguous run is a plain
// loop over kernels::fp8_round, which is branch-free, so it vectorises.
#include "backend/fp8.hpp"

#include <type_traits>

#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

namespace {

template <class From, class To>
void quantize_runs(const Tensor& src, const Tensor& dst, double scale, const kernels::Fp8Params& f) {
  using C = std::conditional_t<std::is_same_v<From, double> || std::is_same_v<To, double>, double, float>;
  const C k = static_cast<C>(scale);
  kernels::for_each_run<2>(dst.shape(), {byte_strides(dst), byte_strides(src)},
                           {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                           [k, f](std::array<char*, 2> p, const std::array<int64_t, 2>& st, int64_t n) {
                             if (st[0] == sizeof(To) && st[1] == sizeof(From)) {
                               To* out = reinterpret_cast<To*>(p[0]);
                               const From* in = reinterpret_cast<const From*>(p[1]);
                               for (int64_t i = 0; i < n; ++i)
                                 out[i] = kernels::cast<To>(kernels::fp8_round(kernels::cast<C>(in[i]) * k, f));
                               return;
                             }
                             for (int64_t i = 0; i < n; ++i) {
                               const C v = kernels::cast<C>(*reinterpret_cast<const From*>(p[1] + i * st[1]));
                               *reinterpret_cast<To*>(p[0] + i * st[0]) = kernels::cast<To>(kernels::fp8_round(v * k, f));
                             }
                           });
}

}  // namespace

void fp8_quantize(const Tensor& src, const Tensor& dst, const Tensor& scale, const kernels::Fp8Params& format) {
  const double k = scale.defined() ? static_cast<double>(*static_cast<const float*>(scale.raw_data())) : 1.0;
  visit_floating(src.dtype(), "fp8_quantize", [&]<class From>() {
    visit_floating(dst.dtype(), "fp8_quantize", [&]<class To>() { quantize_runs<From, To>(src, dst, k, format); });
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(fp8_quantize_kernel, cpu::fp8_quantize);

}  // namespace mixgrad::backend
