// CPU matrix products: oneDNN matmul (float32; bfloat16 natively where the
// CPU has bfloat16 dot products; float16, and bfloat16 elsewhere, computed in
// float32 from the 16-bit operands: onednn::computes_in_float32), the
// built-in gemm for float64, for configurations oneDNN lacks and for builds
// without oneDNN.
#include <vector>

#include "backend/copy.hpp"
#include "backend/cpu/float32_route.hpp"
#include "backend/cpu/gemm.hpp"
#include "backend/matmul.hpp"
#include "backend/onednn/onednn.hpp"
#include "core/view.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

#if MIXGRAD_WITH_ONEDNN
#include "backend/onednn/common.hpp"
#endif

namespace mixgrad::backend::cpu {

void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

namespace {

// A matrix operand oneDNN (and the packed fallback) reads at full speed: one
// of its two matrix dims has unit stride.
bool plain_matrix(const Tensor& t) {
  const int r = t.ndim();
  return t.strides()[r - 1] == 1 || t.strides()[r - 2] == 1 || t.shape()[r - 1] == 1 || t.shape()[r - 2] == 1;
}

#if MIXGRAD_WITH_ONEDNN

// Batch dims with stride 0 (a broadcast view) as extent 1: oneDNN broadcasts
// extent-1 batch dims itself, while a zero stride sends it to its slow
// reference kernel.
Tensor broadcast_as_unit(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  bool changed = false;
  for (int d = t.ndim() - 3; d >= 0; --d)
    if (strides[d] == 0) {
      shape[d] = 1;
      strides[d] = std::max<int64_t>(1, strides[d + 1] * shape[d + 1]);  // any stride fits an extent of 1
      changed = true;
    }
  if (!changed) return t;
  return view::make(t, shape, strides);
}

struct MatmulEntry {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, bias_md, out_md;
};

// The bias as oneDNN wants it: [1, ..., 1, n], broadcast over the rest.
dnnl::memory::desc bias_md(const Tensor& bias, int rank) {
  Shape shape;
  for (int i = 0; i < rank - 1; ++i) shape.push_back(1);
  shape.push_back(bias.numel());
  return onednn::plain_md(shape, bias.dtype());
}

std::shared_ptr<MatmulEntry> make_matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  auto e = std::make_shared<MatmulEntry>();
  e->a_md = onednn::strided_md(a);
  e->b_md = onednn::strided_md(b);
  e->out_md = onednn::plain_md(out.shape(), out.dtype());
  if (bias.defined()) e->bias_md = bias_md(bias, out.ndim());
  const auto desc = bias.defined() ? MIXGRAD_ONEDNN_CHECK(dnnl::matmul::desc(e->a_md, e->b_md, e->bias_md, e->out_md))
                                   : MIXGRAD_ONEDNN_CHECK(dnnl::matmul::desc(e->a_md, e->b_md, e->out_md));
  auto pd = MIXGRAD_ONEDNN_CHECK(dnnl::matmul::primitive_desc(desc, onednn::engine(), /*allow_empty=*/true));
  onednn::count_primitive();
  if (!pd) return nullptr;
  e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::matmul(pd));
  return e;
}

bool onednn_matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& bias_in, const Tensor& out) {
  if (onednn::computes_in_float32(out.dtype())) {
    Tensor out32 = empty(out.shape(), DType::float32, out.device());
    const Tensor bias32 = bias_in.defined() ? onednn::to_float32(bias_in) : Tensor();
    if (!onednn_matmul(onednn::to_float32(a_in), onednn::to_float32(b_in), bias32, out32)) return false;
    copy_kernel(out32, out);  // written only when oneDNN ran: else the caller's fallback writes out
    return true;
  }
  if (!onednn::native(out.dtype())) return false;
  const Tensor a = broadcast_as_unit(plain_matrix(a_in) ? a_in : a_in.contiguous());
  const Tensor b = broadcast_as_unit(plain_matrix(b_in) ? b_in : b_in.contiguous());
  Tensor bias = bias_in;
  if (bias.defined() && (!onednn::native(bias.dtype()) || !bias.is_contiguous())) bias = onednn::to_float32(bias);
  onednn::Key key(onednn::Family::matmul);
  key.add(a).add(b).add(bias).add(out);
  const auto e = onednn::cache<MatmulEntry>().find_or_make(key, [&] { return make_matmul(a, b, bias, out); });
  if (!e) return false;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, onednn::memory(e->a_md, a)},
                                             {DNNL_ARG_WEIGHTS, onednn::memory(e->b_md, b)},
                                             {DNNL_ARG_DST, onednn::memory(e->out_md, out)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, onednn::memory(e->bias_md, bias));
  onednn::execute(e->prim, args);
  return true;
}

#endif  // MIXGRAD_WITH_ONEDNN

// Element offset of batch `index` (row-major over out's batch dims) in t,
// where t's extent-1 batch dims broadcast.
int64_t batch_offset(const Tensor& t, const Shape& out_shape, int64_t index) {
  int64_t off = 0;
  for (int d = out_shape.ndim() - 3; d >= 0; --d) {
    const int64_t extent = out_shape[d];
    const int64_t i = index % extent;
    index /= extent;
    if (t.shape()[d] != 1) off += i * t.strides()[d];
  }
  return off;
}

template <class T>
void fallback_matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  using Acc = kernels::compute_t<T>;
  const int r = out.ndim();
  const int64_t m = out.shape()[r - 2], n = out.shape()[r - 1], k = a.shape()[r - 1];
  const int64_t batches = m * n == 0 ? 0 : out.numel() / (m * n);
  std::vector<Acc> bias_acc;
  if (bias.defined()) {
    const Tensor bc = bias.contiguous();
    bias_acc.resize(static_cast<size_t>(n));
    visit_floating(bc.dtype(), "matmul", [&]<class B>() {
      const B* p = bc.data<B>();
      for (int64_t j = 0; j < n; ++j) bias_acc[j] = kernels::cast<Acc>(p[j]);
    });
  }
  const T* ap = static_cast<const T*>(a.raw_data());
  const T* bp = static_cast<const T*>(b.raw_data());
  T* op = static_cast<T*>(out.raw_data());
  const fallback::MatView<T> av{nullptr, a.strides()[r - 2], a.strides()[r - 1]};
  const fallback::MatView<T> bv{nullptr, b.strides()[r - 2], b.strides()[r - 1]};
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / std::max<int64_t>(1, m * n * k));
  kernels::parallel_for(batches, grain, [&](int64_t b0, int64_t b1) {
    std::vector<Acc> tmp;
    if constexpr (!std::is_same_v<T, Acc>) tmp.resize(static_cast<size_t>(m * n));
    for (int64_t bi = b0; bi < b1; ++bi) {
      T* o = op + bi * m * n;
      Acc* c;
      if constexpr (std::is_same_v<T, Acc>) {
        c = o;
      } else {
        c = tmp.data();
      }
      fallback::MatView<T> ai = av, bi_view = bv;
      ai.p = ap + batch_offset(a, out.shape(), bi);
      bi_view.p = bp + batch_offset(b, out.shape(), bi);
      fallback::gemm<Acc>(m, n, k, ai, bi_view, c, n, OutputMode::overwrite);
      if (!bias_acc.empty())
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) c[i * n + j] += bias_acc[j];
      if constexpr (!std::is_same_v<T, Acc>)
        for (int64_t i = 0; i < m * n; ++i) o[i] = kernels::cast<T>(c[i]);
    }
  });
}

// Operands of mixed dtypes (autocast's float32 weights beside 16-bit
// activations, on a CPU without 16-bit math): one float32 product.
void mixed_matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  into_float32(out, [&](const Tensor& out32) { matmul(widened(a), widened(b), bias, out32); });
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  if (out.numel() == 0) return;
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype()) return mixed_matmul(a, b, bias, out);
#if MIXGRAD_WITH_ONEDNN
  const int64_t k = a.shape()[a.ndim() - 1];
  if (k > 0 && onednn::use_for(out.numel() * k) && onednn_matmul(a, b, bias, out)) return;
#endif
  visit_floating(out.dtype(), "matmul", [&]<class T>() {
    const Tensor ac = plain_matrix(a) ? a : a.contiguous();
    const Tensor bc = plain_matrix(b) ? b : b.contiguous();
    fallback_matmul<T>(ac, bc, bias, out);
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(matmul, cpu::matmul);

}  // namespace mixgrad::backend
