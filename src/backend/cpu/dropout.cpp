// CPU dropout. Work is split on 4-element boundaries (one Philox block each),
// so a thread never needs a block another thread also draws, and the mask of
// element i is the same whatever the split.
#include "backend/dropout.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

void dropout_apply(const Tensor& src, const Tensor& dst, const DropoutParams& p) {
  visit_floating(dst.dtype(), "dropout", [&]<class T>() {
    using Acc = kernels::compute_t<T>;
    const T* s = src.data<T>();
    T* d = Tensor(dst).data<T>();
    const int64_t n = dst.numel();
    const Acc scale = static_cast<Acc>(p.scale);
    const T zero = kernels::cast<T>(0.0f);
    const int64_t blocks = static_cast<int64_t>(kernels::DropoutMask::counters(n));
    kernels::parallel_for(blocks, kernels::kParallelGrain / 4, [&](int64_t b, int64_t e) {
      bool keep[4];
      for (int64_t blk = b; blk < e; ++blk) {
        p.mask.keep4(static_cast<uint64_t>(blk), keep);
        const int64_t i0 = blk * 4;
        const int len = static_cast<int>(std::min<int64_t>(4, n - i0));
        for (int k = 0; k < len; ++k)
          d[i0 + k] = keep[k] ? kernels::cast<T>(kernels::cast<Acc>(s[i0 + k]) * scale) : zero;
      }
    });
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(dropout_apply, cpu::dropout_apply);

}  // namespace mixgrad::backend
