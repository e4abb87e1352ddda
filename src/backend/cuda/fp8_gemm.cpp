// The FP8 GEMM on CUDA (backend/fp8.hpp): cuBLASLt with E4M3 / E5M2
// operands, float32 accumulation and the inverse scales read from device
// memory. COMPILED, NEVER RUN ON A GPU (docs/cuda.md). amp's linear FP8 sites
// call it on devices of compute capability 8.9+ (docs/fp8.md).
//
// Row-major out [m, n] = a [m, k] · b [n, k]^T is, column-major,
// out' [n, m] = b'^T · a' with b' = [k, n] and a' = [k, m] (leading dim k):
// cuBLASLt's "A" is our b (transposed), its "B" our a, the TN layout FP8
// requires. Its A / B scale pointers multiply the product.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/check.hpp"
#include "backend/cuda/lt_context.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/fp8.hpp"
#include "mixgrad/cuda.hpp"

namespace mixgrad::backend::cuda {

namespace {

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(std::string("fp8_gemm: cuBLASLt error ").append(cublasLtGetStatusString(status))
                          .append(" in ").append(call));
}
#define MIXGRAD_FP8_LT_CHECK(call) check((call), #call)

cudaDataType_t fp8_type(const kernels::Fp8Params& f) {
  return f.has_inf ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
}

// The shapes, formats, dtypes and device FP8 GEMMs take; else DeviceError /
// ValueError naming the op, before any call.
void check_problem(const Fp8Operand& a, const Fp8Operand& b, const Tensor& out, int device) {
  const int cc = compute_capability(device);
  if (cc < 89)
    throw DeviceError(std::string("fp8_gemm: needs compute capability 8.9 or newer, device ")
                          .append(std::to_string(device)).append(" has ").append(std::to_string(cc / 10))
                          .append(".").append(std::to_string(cc % 10)));
  const int64_t m = a.codes.shape()[0], n = b.codes.shape()[0], k = a.codes.shape()[1];
  if (k % 16 != 0 || m % 16 != 0 || n % 16 != 0 || b.codes.shape()[1] != k)
    throw ValueError(std::string("fp8_gemm: cuBLASLt's FP8 GEMM needs k, m and n multiples of 16, got a ")
                         .append(to_string(a.codes.shape())).append(" and b ").append(to_string(b.codes.shape())));
  if (a.format.has_inf && b.format.has_inf)
    throw ValueError("fp8_gemm: E5M2 x E5M2 has no cuBLASLt kernel (one operand must be E4M3)");
  if (out.dtype() != DType::float32 && out.dtype() != DType::bfloat16)
    throw DTypeError(std::string("fp8_gemm: out must be float32 or bfloat16, got ")
                         .append(std::string(to_string(out.dtype()))));
}

struct Descriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};

}  // namespace

void fp8_gemm(const Fp8Operand& a, const Fp8Operand& b, const Tensor& out) {
  const int device = out.device().index();
  DeviceGuard guard(device);
  check_problem(a, b, out, device);
  const uint64_t m = static_cast<uint64_t>(a.codes.shape()[0]), n = static_cast<uint64_t>(b.codes.shape()[0]);
  const uint64_t k = static_cast<uint64_t>(a.codes.shape()[1]);
  const cudaDataType_t out_type = out.dtype() == DType::float32 ? CUDA_R_32F : CUDA_R_16BF;
  Descriptors ds;
  MIXGRAD_FP8_LT_CHECK(cublasLtMatmulDescCreate(&ds.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  MIXGRAD_FP8_LT_CHECK(cublasLtMatmulDescSetAttribute(ds.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  MIXGRAD_FP8_LT_CHECK(cublasLtMatmulDescSetAttribute(ds.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const void* lt_a_scale = b.scale_inv.raw_data();  // cuBLASLt's A is our b
  const void* lt_b_scale = a.scale_inv.raw_data();
  MIXGRAD_FP8_LT_CHECK(
      cublasLtMatmulDescSetAttribute(ds.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &lt_a_scale, sizeof(lt_a_scale)));
  MIXGRAD_FP8_LT_CHECK(
      cublasLtMatmulDescSetAttribute(ds.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &lt_b_scale, sizeof(lt_b_scale)));
  MIXGRAD_FP8_LT_CHECK(cublasLtMatrixLayoutCreate(&ds.a, fp8_type(b.format), k, n, static_cast<int64_t>(k)));
  MIXGRAD_FP8_LT_CHECK(cublasLtMatrixLayoutCreate(&ds.b, fp8_type(a.format), k, m, static_cast<int64_t>(k)));
  MIXGRAD_FP8_LT_CHECK(cublasLtMatrixLayoutCreate(&ds.d, out_type, n, m, static_cast<int64_t>(n)));
  MIXGRAD_FP8_LT_CHECK(cublasLtMatmulPreferenceCreate(&ds.pref));
  const uint64_t ws = kLtWorkspaceBytes;
  MIXGRAD_FP8_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof(ws)));
  const cublasLtHandle_t lt = lt_handle(device);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  MIXGRAD_FP8_LT_CHECK(
      cublasLtMatmulAlgoGetHeuristic(lt, ds.desc, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &result, &found));
  if (found == 0) throw DeviceError("fp8_gemm: cuBLASLt offers no FP8 algorithm for this problem");
  const float alpha = 1.0f, beta = 0.0f;
  const cudaStream_t stream = current_stream(device);
  MIXGRAD_FP8_LT_CHECK(cublasLtMatmul(lt, ds.desc, &alpha, b.codes.raw_data(), ds.a, a.codes.raw_data(), ds.b, &beta,
                                      out.raw_data(), ds.d, out.raw_data(), ds.d, &result.algo,
                                      lt_workspace(device, stream), ws, stream));
}

MIXGRAD_CUDA_KERNEL(fp8_gemm, fp8_gemm);

bool fp8_gemm_available(int device) { return compute_capability(device) >= 89; }

}  // namespace mixgrad::backend::cuda

namespace mixgrad::cuda {

bool fp8_gemm_available(int device) { return backend::cuda::fp8_gemm_available(device); }

}  // namespace mixgrad::backend::cuda
