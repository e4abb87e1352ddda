// CPU side of the FP8 cast (backend/fp8.hpp). A contiguous run is a plain
// loop over kernels::fp8_round, which is branch-free, so it vectorises.
#include "backend/fp8.hpp"

#include <type_traits>

#include "backend/matmul.hpp"
#include "core/view.hpp"
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
                               To* out = reinterpret_cast<To*>(p[0] + i * st[0]);
                               *out = kernels::cast<To>(kernels::fp8_round(v * k, f));
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

void fp8_encode(const Tensor& src, const Tensor& codes, const Tensor& scale, const kernels::Fp8Params& f) {
  Tensor rounded = empty(src.shape(), DType::float32, src.device());
  fp8_quantize(src, rounded, scale, f);
  const float* r = rounded.data<float>();
  uint8_t* out = writable<uint8_t>(codes);
  for (int64_t i = 0; i < codes.numel(); ++i) out[i] = kernels::fp8_encode(r[i], f);
}

void fp8_decode(const Tensor& codes, const Tensor& dst, const kernels::Fp8Params& f) {
  Tensor values = dst.dtype() == DType::float32 ? dst : empty(dst.shape(), DType::float32, dst.device());
  const uint8_t* c = codes.data<uint8_t>();
  float* out = writable<float>(values);
  for (int64_t i = 0; i < codes.numel(); ++i) out[i] = kernels::fp8_decode(c[i], f);
  if (values.raw_data() != dst.raw_data()) copy(values, dst);
}

// The reference: the decoded operands' float32 product, then the inverse scales.
void fp8_gemm(const Fp8Operand& a, const Fp8Operand& b, const Tensor& out) {
  const int64_t m = a.codes.shape()[0], n = b.codes.shape()[0], k = a.codes.shape()[1];
  const Tensor av = empty(Shape{m, k}), bv = empty(Shape{n, k});
  fp8_decode(a.codes, av, a.format);
  fp8_decode(b.codes, bv, b.format);
  Tensor acc = empty(Shape{m, n});
  matmul(av, view::make(bv, Shape{k, n}, Shape{1, k}), Tensor(), acc);  // b^T, a view
  const float factor = *a.scale_inv.data<float>() * *b.scale_inv.data<float>();
  float* p = acc.data<float>();
  for (int64_t i = 0; i < m * n; ++i) p[i] *= factor;
  copy(acc, out);
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(fp8_quantize_kernel, cpu::fp8_quantize);
MIXGRAD_CPU_KERNEL(fp8_encode, cpu::fp8_encode);
MIXGRAD_CPU_KERNEL(fp8_decode, cpu::fp8_decode);
MIXGRAD_CPU_KERNEL(fp8_gemm, cpu::fp8_gemm);

}  // namespace mixgrad::backend
