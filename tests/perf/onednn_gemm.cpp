// Built with MIXGRAD_BENCH_ONEDNN=1 where the oneDNN that mixgrad uses is
// found; otherwise the roofline rows say that there is no reference.
#include "onednn_gemm.hpp"

#if MIXGRAD_BENCH_ONEDNN
#include <dnnl.hpp>

#include <cstdio>
#include <vector>
#endif

namespace perf {

#if MIXGRAD_BENCH_ONEDNN
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

class OnednnGemm final : public Runner {
 public:
  OnednnGemm(int64_t m, int64_t k, int64_t n, dt type)
      : engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_),
        a_md_({m, k}, type, tag::ab),
        b_md_({k, n}, type, tag::ab),
        c_md_({m, n}, type, tag::ab) {
#if DNNL_VERSION_MAJOR >= 3
    dnnl::matmul::primitive_desc pd(engine_, a_md_, b_md_, c_md_);
#else
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md_, b_md_, c_md_), engine_);
#endif
    prim_ = dnnl::matmul(pd);
    const size_t elem = type == dt::f32 ? 4 : 2;
    a_.assign(static_cast<size_t>(m * k) * elem / 4 + 1, 0.01f);  // any finite bit pattern will do
    b_.assign(static_cast<size_t>(k * n) * elem / 4 + 1, 0.02f);
    c_.assign(static_cast<size_t>(m * n) * elem / 4 + 1, 0.0f);
  }
  void run() override {
    dnnl::memory a(a_md_, engine_, a_.data()), b(b_md_, engine_, b_.data()), c(c_md_, engine_, c_.data());
    prim_.execute(stream_, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream_.wait();
  }
  double value() const override { return c_[0]; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::memory::desc a_md_, b_md_, c_md_;
  dnnl::matmul prim_;
  std::vector<float> a_, b_, c_;  // storage for either element type
};

}  // namespace

std::unique_ptr<Runner> make_onednn_gemm(int64_t m, int64_t k, int64_t n, Precision precision) {
  if (precision == Precision::fp16) return nullptr;  // a GPU benchmark precision
  try {
    return std::make_unique<OnednnGemm>(m, k, n, precision == Precision::fp32 ? dt::f32 : dt::bf16);
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "oneDNN has no %s matmul here: %s\n", name(precision), e.what());
    return nullptr;
  }
}

const char* onednn_version() {
  static char buf[32];
  const dnnl_version_t* v = dnnl_version();
  std::snprintf(buf, sizeof buf, "%d.%d.%d", v->major, v->minor, v->patch);
  return buf;
}

#else

std::unique_ptr<Runner> make_onednn_gemm(int64_t, int64_t, int64_t, Precision) { return nullptr; }
const char* onednn_version() { return "none"; }

#endif

}  // namespace perf
