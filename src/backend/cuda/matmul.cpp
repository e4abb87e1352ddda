// CUDA matrix products through cuBLASLt. The row-major -> column-major
// translation (transposes, leading dims, batch strides, calls for batch dims
// one stride cannot express) is the pure plan of cuda/gemm_plan.hpp, which
// the host tests execute with a reference loop against the CPU backend.
//
// Math: float32 with 32-bit compute (no TF32, so results match the CPU's
// float32 within summation order), float16 / bfloat16 with float32
// accumulation on the tensor cores (CUBLAS_COMPUTE_32F), float64 in double.
// The bias is a BIAS epilogue (one vector over every batch); where cuBLASLt
// has no such kernel the bias is added by the elementwise add instead.
//
// Caches: one cuBLASLt handle per device; per (device, stream) a workspace
// from the caching allocator; per thread, descriptors and the heuristic's
// algorithm per problem (shapes, strides, dtype, pointer alignment).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "backend/copy.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/gemm_plan.hpp"
#include "backend/cuda/lt_context.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/elementwise.hpp"
#include "backend/matmul.hpp"

namespace mixgrad::backend::cuda {

namespace {

void check_lt(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(std::string("matmul: cuBLASLt error ") + cublasLtGetStatusString(status) + " in " + call);
}
#define MIXGRAD_CUBLASLT_CHECK(call) check_lt((call), #call)

}  // namespace

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mutex;
  static std::array<cublasLtHandle_t, kMaxDevices> handles{};
  std::lock_guard<std::mutex> lock(mutex);
  if (!handles[device]) MIXGRAD_CUBLASLT_CHECK(cublasLtCreate(&handles[device]));
  return handles[device];
}

// A workspace per (device, stream): the caching allocator ties a block to
// the stream it was allocated on, and a call on another stream would race
// for it.
void* lt_workspace(int device, cudaStream_t stream) {
  static std::mutex mutex;
  // Never destroyed, like the allocator: freeing at exit could come after
  // the CUDA runtime has shut down.
  static auto* spaces = new std::map<std::pair<int, cudaStream_t>, Tensor>;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, fresh] = spaces->try_emplace({device, stream});
  if (fresh) it->second = empty(Shape{static_cast<int64_t>(kLtWorkspaceBytes)}, DType::bool_, Device::cuda(device));
  return it->second.raw_data();
}

namespace {

struct Types {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

Types types_of(DType t, const Tensor& out) {
  switch (t) {
    case DType::float32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::bfloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    default:
      throw DTypeError("matmul: no CUDA kernel for dtype " + std::string(to_string(t)) + " (output " +
                       to_string(out.shape()) + "); use a floating dtype");
  }
}

// Largest power of two up to 16 dividing the address (cuBLASLt picks
// vectorised kernels by the alignment it is promised).
int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 16;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

struct Problem {
  std::array<int64_t, 12> dims{};  // rows, cols, depth, lda, ldb, ldc, batch, strides x3, flags, alignment
  DType dtype = DType::float32;
  bool bias = false;
  bool operator<(const Problem& o) const {
    return std::tie(dims, dtype, bias) < std::tie(o.dims, o.dtype, o.bias);
  }
};

// Descriptors and the chosen algorithm of one problem; destroyed with the
// thread's cache.
struct Entry {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool found = false;  // a heuristic result exists
  ~Entry() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  MIXGRAD_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    MIXGRAD_CUBLASLT_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    MIXGRAD_CUBLASLT_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

std::unique_ptr<Entry> make_entry(const cuda_plan::GemmPlan& p, const Types& t, bool bias, int align,
                                  cublasLtHandle_t lt, const void* bias_ptr) {
  auto e = std::make_unique<Entry>();
  MIXGRAD_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&e->desc, t.compute, t.scale));
  const cublasOperation_t ta = p.first.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p.second.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  MIXGRAD_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  MIXGRAD_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    MIXGRAD_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    MIXGRAD_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  // Stored shapes: op N stores op(X) itself, op T its transpose.
  e->a = p.first.transposed ? layout(t.data, p.depth, p.rows, p.first.ld, p.batch, p.stride_first)
                            : layout(t.data, p.rows, p.depth, p.first.ld, p.batch, p.stride_first);
  e->b = p.second.transposed ? layout(t.data, p.cols, p.depth, p.second.ld, p.batch, p.stride_second)
                             : layout(t.data, p.depth, p.cols, p.second.ld, p.batch, p.stride_second);
  e->c = layout(t.data, p.rows, p.cols, p.ldc, p.batch, p.stride_out);

  cublasLtMatmulPreference_t pref = nullptr;
  MIXGRAD_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kLtWorkspaceBytes;
  const uint32_t al = static_cast<uint32_t>(align);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt, e->desc, e->a, e->b, e->c, e->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    e->algo = result.algo;
    e->workspace = result.workspaceSize;
    e->found = true;
  } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
    check_lt(st, "cublasLtMatmulAlgoGetHeuristic");
  }
  return e;
}

// Runs the plan; false when cuBLASLt has no algorithm for it (then nothing
// was written).
bool run_plan(const cuda_plan::GemmPlan& p, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
              int device, cudaStream_t stream) {
  const Types t = types_of(out.dtype(), out);
  const int64_t es = element_size(out.dtype());
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  int align = 16;
  for (const auto& c : p.calls) {
    align = std::min({align, alignment_of(pa + c.a * es), alignment_of(pb + c.b * es), alignment_of(po + c.out * es)});
  }
  if (p.batch > 1)
    for (int64_t s : {p.stride_first, p.stride_second, p.stride_out})
      if (s != 0) align = std::min(align, alignment_of(reinterpret_cast<const void*>(static_cast<uintptr_t>(s * es))));
  for (int64_t ld : {p.first.ld, p.second.ld, p.ldc})
    align = std::min(align, alignment_of(reinterpret_cast<const void*>(static_cast<uintptr_t>(ld * es))));
  const void* bias_ptr = bias.defined() ? bias.raw_data() : nullptr;
  if (bias_ptr) align = std::min(align, alignment_of(bias_ptr));

  Problem key;
  key.dims = {p.rows, p.cols, p.depth, p.first.ld, p.second.ld, p.ldc, p.batch, p.stride_first, p.stride_second,
              p.stride_out, (p.first.transposed ? 1 : 0) | (p.second.transposed ? 2 : 0) | (int64_t{device} << 2),
              align};
  key.dtype = out.dtype();
  key.bias = bias.defined();
  thread_local std::map<Problem, std::unique_ptr<Entry>> cache;
  const cublasLtHandle_t lt = lt_handle(device);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_entry(p, t, key.bias, align, lt, bias_ptr)).first;
  Entry& e = *it->second;
  if (!e.found) return false;
  if (bias_ptr)
    MIXGRAD_CUBLASLT_CHECK(
        cublasLtMatmulDescSetAttribute(e.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  const float one_f = 1.f, zero_f = 0.f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool dbl = t.scale == CUDA_R_64F;
  const void* alpha = dbl ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = dbl ? static_cast<const void*>(&zero_d) : &zero_f;
  void* ws = e.workspace > 0 ? lt_workspace(device, stream) : nullptr;
  for (const auto& c : p.calls) {
    // cuBLAS's A is from b and its B from a (see gemm_plan.hpp).
    MIXGRAD_CUBLASLT_CHECK(cublasLtMatmul(lt, e.desc, alpha, pb + c.b * es, e.a, pa + c.a * es, e.b, beta,
                                          po + c.out * es, e.c, po + c.out * es, e.c, &e.algo, ws, e.workspace,
                                          stream));
  }
  return true;
}

Tensor contiguous_on_device(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor c = empty(x.shape(), x.dtype(), x.device());
  backend::copy(x, c);
  return c;
}

void check_device(const char* what, const Tensor& t, const Tensor& out) {
  if (t.device() != out.device())
    throw DeviceError(std::string("matmul: ") + what + " on " + to_string(t.device()) + ", output on " +
                      to_string(out.device()) + "; move it with Tensor::to(Device) first");
}

}  // namespace

void matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& bias_in, const Tensor& out) {
  check_device("a", a_in, out);
  check_device("b", b_in, out);
  if (bias_in.defined()) check_device("bias", bias_in, out);
  (void)types_of(out.dtype(), out);  // DTypeError before any work
  if (out.numel() == 0) return;
  const int device = out.device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  Tensor a = a_in, b = b_in;
  cuda_plan::GemmPlan p = cuda_plan::make_gemm_plan(a.shape(), a.strides(), b.shape(), b.strides(), out.shape());
  if (p.first.needs_copy || p.second.needs_copy) {
    if (p.second.needs_copy) a = contiguous_on_device(a);
    if (p.first.needs_copy) b = contiguous_on_device(b);
    p = cuda_plan::make_gemm_plan(a.shape(), a.strides(), b.shape(), b.strides(), out.shape());
  }
  // The epilogue reads the bias in out's dtype, contiguous.
  Tensor bias = bias_in;
  if (bias.defined() && (bias.dtype() != out.dtype() || !bias.is_contiguous())) {
    Tensor converted = empty(bias.shape(), out.dtype(), out.device());
    backend::copy(bias, converted);
    bias = converted;
  }
  if (p.depth == 0) {  // an empty sum: zeros (cuBLAS would leave C as it is)
    backend::fill(out, 0.0);
  } else if (!run_plan(p, a, b, bias, out, device, stream)) {
    if (!bias.defined() || !run_plan(p, a, b, Tensor(), out, device, stream))
      throw DeviceError("matmul: cuBLASLt has no algorithm for " + to_string(a.shape()) + " x " +
                        to_string(b.shape()) + " in " + std::string(to_string(out.dtype())));
    backend::binary(BinaryOp::add, Operand(out), Operand(bias), out);
    return;
  }
  if (p.depth == 0 && bias.defined()) backend::binary(BinaryOp::add, Operand(out), Operand(bias), out);
}

MIXGRAD_CUDA_KERNEL(matmul, matmul);

}  // namespace mixgrad::backend::cuda
