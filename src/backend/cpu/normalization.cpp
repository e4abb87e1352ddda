// CPU normalization (backend/normalization.hpp): the layer-norm kernels,
// which group and instance norm run too (ops/normalization.cpp). Each row
// is read twice in the forward (mean, then the variance about it: no
// cancellation from E[x^2] - E[x]^2) and written once.
// The backward produces dx and the weight / bias partial sums in the same
// pass over fixed blocks of rows; the partials are then added block by block
// in order, so the gradients do not depend on the thread count. Both are
// compiled for the baseline ISA, AVX2 and AVX-512 and picked by
// simd::level().
#include <cmath>
#include <vector>

#include "backend/copy.hpp"
#include "backend/cpu/isa_variants.hpp"
#include "backend/normalization.hpp"
#include "kernels/cast.hpp"
#include "kernels/normalization.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

namespace {

using kernels::cast;


constexpr int kLanes = 8;             // independent accumulators, so a row sum vectorises
constexpr int64_t kRowBlock = 32;     // rows per weight / bias partial sum

template <class Acc, class Value>
[[gnu::always_inline]] inline Acc row_sum(int64_t n, const Value& value) {
  Acc lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += value(j + k);
  for (; j < n; ++j) lanes[0] += value(j);
  Acc s = 0;
  for (int k = 0; k < kLanes; ++k) s += lanes[k];
  return s;
}

/// Rows [b, e) of the forward.
template <class T>
struct Forward {
  using Acc = kernels::compute_t<T>;
  const T* x;
  const Acc* w;     // null: no weight
  const Acc* bias;  // null: no bias
  T* y;
  Acc* mean_out;
  Acc* rstd_out;
  int64_t cols;
  Acc eps;

  [[gnu::always_inline]] void run(int64_t b, int64_t e) const {
    const Acc inv_cols = Acc(1) / static_cast<Acc>(cols);
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const Acc mean =
          row_sum<Acc>(cols, [&](int64_t j) __attribute__((always_inline)) { return cast<Acc>(xr[j]); }) * inv_cols;
      const Acc var = row_sum<Acc>(cols, [&](int64_t j) __attribute__((always_inline)) {
                        const Acc d = cast<Acc>(xr[j]) - mean;
                        return d * d;
                      }) * inv_cols;
      const Acc rstd = Acc(1) / std::sqrt(var + eps);
      mean_out[r] = mean;
      rstd_out[r] = rstd;
      for (int64_t j = 0; j < cols; ++j) {
        const Acc wj = w ? w[j] : Acc(1);
        const Acc bj = bias ? bias[j] : Acc(0);
        yr[j] = cast<T>(kernels::layer_norm_value(cast<Acc>(xr[j]), mean, rstd, wj, bj));
      }
    }
  }
};

/// Row blocks [b, e) of the backward: dx, and each block's weight and bias
/// partial sums.
template <class T>
struct Backward {
  using Acc = kernels::compute_t<T>;
  const T* x;
  const Acc* w;  // a row of ones without a weight: the inner loops have no branch
  const T* g;
  const Acc* mean;
  const Acc* rstd;
  T* gx;     // null: no dx
  Acc* part_w;  // null: no weight gradient
  Acc* part_b;  // null: no bias gradient
  int64_t rows, cols;

  [[gnu::always_inline]] void run(int64_t b, int64_t e) const {
    const Acc inv_cols = Acc(1) / static_cast<Acc>(cols);
    for (int64_t blk = b; blk < e; ++blk) {
      Acc* pw = part_w ? part_w + blk * cols : nullptr;
      Acc* pb = part_b ? part_b + blk * cols : nullptr;
      for (int64_t j = 0; j < cols; ++j) {
        if (pw) pw[j] = 0;
        if (pb) pb[j] = 0;
      }
      for (int64_t r = blk * kRowBlock; r < std::min(rows, (blk + 1) * kRowBlock); ++r) {
        const T* xr = x + r * cols;
        const T* gr = g + r * cols;
        const Acc m = mean[r], rs = rstd[r];
        if (pw)
          for (int64_t j = 0; j < cols; ++j) pw[j] += cast<Acc>(gr[j]) * ((cast<Acc>(xr[j]) - m) * rs);
        if (pb)
          for (int64_t j = 0; j < cols; ++j) pb[j] += cast<Acc>(gr[j]);
        if (!gx) continue;
        // Both row sums in one pass, kLanes apart so the pass vectorises.
        Acc s_dy[kLanes] = {}, s_dy_xhat[kLanes] = {};
        int64_t j = 0;
        for (; j + kLanes <= cols; j += kLanes)
          for (int k = 0; k < kLanes; ++k) {
            const Acc dy = cast<Acc>(gr[j + k]) * w[j + k];
            s_dy[k] += dy;
            s_dy_xhat[k] += dy * ((cast<Acc>(xr[j + k]) - m) * rs);
          }
        for (; j < cols; ++j) {
          const Acc dy = cast<Acc>(gr[j]) * w[j];
          s_dy[0] += dy;
          s_dy_xhat[0] += dy * ((cast<Acc>(xr[j]) - m) * rs);
        }
        Acc mean_dy = 0, mean_dy_xhat = 0;
        for (int k = 0; k < kLanes; ++k) {
          mean_dy += s_dy[k];
          mean_dy_xhat += s_dy_xhat[k];
        }
        mean_dy *= inv_cols;
        mean_dy_xhat *= inv_cols;
        T* gxr = gx + r * cols;
        for (int64_t jj = 0; jj < cols; ++jj)
          gxr[jj] = cast<T>(kernels::layer_norm_grad_x(cast<Acc>(gr[jj]) * w[jj], (cast<Acc>(xr[jj]) - m) * rs, rs,
                                                       mean_dy, mean_dy_xhat));
      }
    }
  }
};

/// Runs job over [0, n) on the library's threads, in the instruction-set
/// variant of simd::level() (the same loops at each level, so the same sums
/// in the same order).
template <class Job>
void run(const Job& job, int64_t n, int64_t grain) {
  const auto fn = isa::variant<isa::RunJob, const Job&, int64_t, int64_t>();
  kernels::parallel_for(n, grain, [&](int64_t b, int64_t e) { fn(isa::RunJob{}, job, b, e); });
}

template <class T>
void forward_typed(const LayerNormArgs& a, const LayerNormOutputs& o) {
  using Acc = kernels::compute_t<T>;
  const Forward<T> job{a.x.data<T>(),
                       a.weight.defined() ? a.weight.data<Acc>() : nullptr,
                       a.bias.defined() ? a.bias.data<Acc>() : nullptr,
                       writable<T>(o.out),
                       writable<Acc>(o.mean),
                       writable<Acc>(o.rstd),
                       a.cols,
                       static_cast<Acc>(a.eps)};
  run(job, a.rows, std::max<int64_t>(1, kernels::kParallelGrain / a.cols));
}

template <class T>
void backward_typed(const LayerNormArgs& a, const LayerNormOutputs& saved, const Tensor& grad_out,
                    const LayerNormGrads& grads) {
  using Acc = kernels::compute_t<T>;
  const bool want_w = grads.weight.defined(), want_b = grads.bias.defined();
  const int64_t rows = a.rows, cols = a.cols;
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::vector<Acc> part_w(want_w ? blocks * cols : 0), part_b(want_b ? blocks * cols : 0);
  std::vector<Acc> ones(a.weight.defined() ? 0 : cols, Acc(1));
  const Backward<T> job{a.x.data<T>(),
                        a.weight.defined() ? a.weight.data<Acc>() : ones.data(),
                        grad_out.data<T>(),
                        saved.mean.data<Acc>(),
                        saved.rstd.data<Acc>(),
                        grads.x.defined() ? writable<T>(grads.x) : nullptr,
                        want_w ? part_w.data() : nullptr,
                        want_b ? part_b.data() : nullptr,
                        rows,
                        cols};
  run(job, blocks, std::max<int64_t>(1, kernels::kParallelGrain / (kRowBlock * cols)));
  // Block partials added in block order: the same sums on any thread count.
  auto finish = [&](const std::vector<Acc>& part, const Tensor& dst) {
    Acc* d = writable<Acc>(dst);
    kernels::parallel_for(cols, std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, blocks)),
                          [&](int64_t b, int64_t e) {
                            for (int64_t j = b; j < e; ++j) {
                              Acc s = 0;
                              for (int64_t blk = 0; blk < blocks; ++blk) s += part[blk * cols + j];
                              d[j] = s;
                            }
                          });
  };
  if (want_w) finish(part_w, grads.weight);
  if (want_b) finish(part_b, grads.bias);
}

}  // namespace

void layer_norm_forward(const LayerNormArgs& a, const LayerNormOutputs& o) {
  if (a.rows * a.cols == 0) return;
  visit_floating(a.x.dtype(), "layer_norm", [&]<class T>() { forward_typed<T>(a, o); });
}

void layer_norm_backward(const LayerNormArgs& a, const LayerNormOutputs& saved, const Tensor& grad_out,
                         const LayerNormGrads& grads) {
  if (a.rows * a.cols == 0) {  // nothing normalised: zero gradients of the right shape
    for (const Tensor* t : {&grads.x, &grads.weight, &grads.bias})
      if (t->defined()) fill(*t, 0.0);
    return;
  }
  visit_floating(a.x.dtype(), "layer_norm", [&]<class T>() { backward_typed<T>(a, saved, grad_out, grads); });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(layer_norm_forward, cpu::layer_norm_forward);
MIXGRAD_CPU_KERNEL(layer_norm_backward, cpu::layer_norm_backward);

}  // namespace mixgrad::backend
