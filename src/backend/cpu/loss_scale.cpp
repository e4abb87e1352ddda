// CPU side of dynamic loss scaling: the scaled upstream gradient and the
// scale update. The scale tensors live in host memory, so reading them here
// is a plain load.
#include "backend/loss_scale.hpp"

#include "backend/copy.hpp"
#include "kernels/grad_scaling.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

namespace {
double scalar_value(const Tensor& t) {
  return t.dtype() == DType::float64 ? *static_cast<const double*>(t.raw_data())
                                     : static_cast<double>(*static_cast<const float*>(t.raw_data()));
}
}  // namespace

void scale_copy(const Tensor& src, const Tensor& dst, const Tensor& scale) {
  const double factor = scalar_value(scale);
  if (!src.defined()) {
    fill(dst, factor);  // the scale rounded once to dst's dtype, as full_like(dst, scale)
    return;
  }
  visit_dtype(src.dtype(), [&]<class From>() {
    visit_floating(dst.dtype(), "scale_copy", [&]<class To>() {
      const kernels::ScaleCopy<From, To> op{kernels::applied_factor<To>(factor)};
      kernels::for_each_run<2>(dst.shape(), {byte_strides(dst), byte_strides(src)},
                               {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                               [op](std::array<char*, 2> p, const std::array<int64_t, 2>& st, int64_t n) {
                                 for (int64_t i = 0; i < n; ++i)
                                   *reinterpret_cast<To*>(p[0] + i * st[0]) =
                                       op(*reinterpret_cast<const From*>(p[1] + i * st[1]));
                               });
    });
  });
}

void update_scale(const Tensor& scale, const Tensor& inv_scale, const Tensor& growth_tracker, const Tensor& found_inf,
                  const ScaleUpdateOptions& o) {
  const kernels::ScaleUpdate rule{o.growth_factor, o.backoff_factor, o.min_scale, o.max_scale, o.growth_interval};
  const bool found = found_inf.defined() && *static_cast<const float*>(found_inf.raw_data()) != 0.0f;
  rule(*static_cast<double*>(scale.raw_data()), *static_cast<double*>(inv_scale.raw_data()),
       *static_cast<int64_t*>(growth_tracker.raw_data()), found);
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(scale_copy_kernel, cpu::scale_copy);
MIXGRAD_CPU_KERNEL(update_scale, cpu::update_scale);

}  // namespace mixgrad::backend
