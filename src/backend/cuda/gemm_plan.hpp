// Pure plan of the CUDA matrix product (cuda/matmul.cpp): how a row-major
// batched product out[..., m, n] = a[..., m, k] · b[..., k, n] with any
// operand strides and broadcast batch dims becomes column-major cuBLASLt
// calls. No CUDA headers; the host tests execute the plan with a reference
// column-major loop and compare with the CPU backend for every shape family
// of the op registry (tests/cuda/test_cuda_plan.cpp).
//
// A row-major [m, n] matrix is, read column-major, its transpose [n, m].
// So out^T = b^T · a^T is the column-major product
//   C (n x m, ldc = n) = op(A) (n x k) · op(B) (k x m),   A from b, B from a,
// where each of A and B is taken as stored (op = N: the operand's inner dim
// has unit stride) or transposed (op = T: its outer dim has unit stride).
// A matrix with neither unit stride must be copied first (copy_a / copy_b).
//
//   const auto p = cuda_plan::make_gemm_plan(a.shape(), a.strides(), b.shape(), b.strides(), out.shape());
//   for (const auto& call : p.calls)   // one strided-batched call each
//     gemm(p, a_ptr + call.a, b_ptr + call.b, out_ptr + call.out);
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mixgrad/shape.hpp"

namespace mixgrad::backend::cuda_plan {

/// One column-major operand: transposed in the op or not, and its leading dimension.
struct GemmOperand {
  bool transposed = false;
  int64_t ld = 1;
  bool needs_copy = false;  // neither matrix dim has unit stride: copy to contiguous first
};

/// Element offsets of one strided-batched call (batch dims the strides cannot express).
struct GemmCall {
  int64_t a = 0, b = 0, out = 0;
};

struct GemmPlan {
  int64_t rows = 0;   // of C: n
  int64_t cols = 0;   // of C: m
  int64_t depth = 0;  // k
  GemmOperand first;   // cuBLAS's A: from b
  GemmOperand second;  // cuBLAS's B: from a
  int64_t ldc = 1;
  int64_t batch = 1;                  // matrices per call
  int64_t stride_first = 0;           // element batch strides (0: broadcast)
  int64_t stride_second = 0;
  int64_t stride_out = 0;
  std::vector<GemmCall> calls;        // empty when out has no elements
};

/// A row-major [r, c] matrix with element strides (sr, sc) as a column-major
/// operand of op(X) = its transpose (c x r): stored column-major as c x r
/// (ld = sr, op N) when its rows are contiguous, else as r x c (ld = sc, op T)
/// when its columns are; neither: needs_copy. Strides of extent-1 dims are
/// free, so the leading dimension is then the smallest valid one.
inline GemmOperand column_major_operand(int64_t r, int64_t c, int64_t sr, int64_t sc) {
  GemmOperand op;
  if ((c == 1 || sc == 1) && (r == 1 || sr >= std::max<int64_t>(1, c))) {
    op.transposed = false;
    op.ld = r == 1 ? std::max<int64_t>(1, c) : sr;
    return op;
  }
  if ((r == 1 || sr == 1) && (c == 1 || sc >= std::max<int64_t>(1, r))) {
    op.transposed = true;
    op.ld = c == 1 ? std::max<int64_t>(1, r) : sc;
    return op;
  }
  op.needs_copy = true;
  return op;
}

/// The plan of out = a · b (see the file comment). a, b and out have the same
/// rank (>= 2); a batch extent of a or b equals out's or is 1 (broadcast:
/// batch stride 0); out is contiguous.
inline GemmPlan make_gemm_plan(const Shape& a_shape, const Shape& a_strides, const Shape& b_shape,
                               const Shape& b_strides, const Shape& out_shape) {
  const int r = out_shape.ndim();
  GemmPlan p;
  const int64_t m = out_shape[r - 2], n = out_shape[r - 1], k = a_shape[r - 1];
  p.rows = n;
  p.cols = m;
  p.depth = k;
  p.first = column_major_operand(k, n, b_strides[r - 2], b_strides[r - 1]);
  p.second = column_major_operand(m, k, a_strides[r - 2], a_strides[r - 1]);
  p.ldc = std::max<int64_t>(1, n);
  if (out_shape.numel() == 0) return p;

  // Batch dims of extent > 1, outermost first, with each operand's stride
  // (0 where a or b broadcasts) and out's (contiguous).
  struct Dim {
    int64_t extent, a, b, out;
  };
  std::vector<Dim> dims;
  int64_t out_stride = m * n;
  std::vector<Dim> rev;
  for (int d = r - 3; d >= 0; --d) {
    const int64_t e = out_shape[d];
    if (e != 1)
      rev.push_back({e, a_shape[d] == 1 ? 0 : a_strides[d], b_shape[d] == 1 ? 0 : b_strides[d], out_stride});
    out_stride *= e;
  }
  dims.assign(rev.rbegin(), rev.rend());

  // The longest run of innermost batch dims over which every operand's
  // offset is one stride times the batch index: one strided-batched call.
  size_t inner = dims.size();
  if (!dims.empty()) {
    inner = dims.size() - 1;
    while (inner > 0) {
      const Dim& outer = dims[inner - 1];
      const Dim& in = dims[inner];
      if (outer.a != in.a * in.extent || outer.b != in.b * in.extent || outer.out != in.out * in.extent) break;
      --inner;
    }
  }
  if (inner < dims.size()) {
    p.batch = 1;
    for (size_t d = inner; d < dims.size(); ++d) p.batch *= dims[d].extent;
    p.stride_second = dims.back().a;
    p.stride_first = dims.back().b;
    p.stride_out = dims.back().out;
  }
  // The remaining outer dims: one call per position.
  int64_t calls = 1;
  for (size_t d = 0; d < inner; ++d) calls *= dims[d].extent;
  p.calls.reserve(static_cast<size_t>(calls));
  for (int64_t c = 0; c < calls; ++c) {
    GemmCall call;
    int64_t rest = c;
    for (size_t d = inner; d-- > 0;) {
      const int64_t i = rest % dims[d].extent;
      rest /= dims[d].extent;
      call.a += i * dims[d].a;
      call.b += i * dims[d].b;
      call.out += i * dims[d].out;
    }
    p.calls.push_back(call);
  }
  return p;
}

}  // namespace mixgrad::backend::cuda_plan
