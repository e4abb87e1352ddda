// CUDA fused attention: cuDNN's scaled dot-product attention (flash
// attention on the tensor cores), forward and backward, through the graph
// API of the cuDNN frontend (the header-only `cudnn_frontend.h`). Which calls
// it takes and the dims and strides of every tensor come from the pure plan
// of cuda/attention_plan.hpp, which the host tests read back as cuDNN does.
//
// A graph is built per (device, dtype, direction, plan) and cached per
// thread: validate, lower to cuDNN's operation graph, take the heuristics'
// engine configurations, check support, build the plans. A call cuDNN does
// not support, or whose graph fails to build (an older GPU, a cuDNN that
// lacks the engine), returns false having written nothing, and the op runs
// the composed math instead; the failure is cached, so it costs one build.
//
// Math: float16 / bfloat16 inputs and outputs, float32 softmax statistics
// and accumulation; the forward's statistics are the rows' log-sum-exp of the
// scaled, biased scores (what the backward reads), as on the CPU.
#include "backend/attention.hpp"

#include <atomic>

namespace mixgrad::backend::cuda {
namespace {
std::atomic<int64_t> g_runs{0};
}  // namespace
int64_t fused_attention_runs() { return g_runs.load(); }
}  // namespace mixgrad::backend::cuda

#if MIXGRAD_WITH_CUDNN_FRONTEND

#include <cudnn_frontend.h>

#include <array>
#include <bit>
#include <compare>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/attention_plan.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/cudnn_handle.hpp"

namespace mixgrad::backend::cuda {

namespace {

namespace fe = cudnn_frontend;
using cuda_plan::AttentionPlan;
using cuda_plan::GraphDesc4;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

constexpr const char* kOp = "scaled_dot_product_attention (CUDA)";

/// The graph's tensors, by the uid the variant pack names them with.
enum Uid : int64_t { kQ = 1, kK, kV, kOut, kStats, kBias, kGradOut, kGradQ, kGradK, kGradV };

/// The most graphs a thread keeps; the cache starts over beyond it.
constexpr size_t kMaxGraphs = 256;

struct GraphKey {
  int device = 0;
  DType dtype = DType::float16;
  bool backward = false;
  std::vector<int64_t> layout;  // q, k, v and bias dims and strides, causal, bias, scale's bits
  auto operator<=>(const GraphKey&) const = default;
};

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  std::string error;  // why it did not build; empty when it did
};

GraphKey key_of(const AttentionPlan& p, int device, DType dtype, bool backward) {
  GraphKey k{device, dtype, backward, {}};
  // out, stats and the gradients are dense: their layouts follow from the dims.
  for (const GraphDesc4* d : {&p.q, &p.k, &p.v, &p.bias}) {
    k.layout.insert(k.layout.end(), d->dims.begin(), d->dims.end());
    k.layout.insert(k.layout.end(), d->strides.begin(), d->strides.end());
  }
  k.layout.push_back(p.causal);
  k.layout.push_back(p.has_bias);
  k.layout.push_back(std::bit_cast<int32_t>(p.scale));
  return k;
}

TensorPtr input(fe::graph::Graph& g, const char* name, int64_t uid, const GraphDesc4& d) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(d.dims).set_stride(d.strides));
}

void output(const TensorPtr& t, int64_t uid, const GraphDesc4& d) {
  t->set_output(true).set_uid(uid).set_dim(d.dims).set_stride(d.strides);
}

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dtype == DType::bfloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

/// Validates, lowers and plans g; the first step's error, or "".
std::string build(fe::graph::Graph& g, cudnnHandle_t h, int64_t& workspace) {
  auto failed = [](const char* step, fe::error_t e) { return std::string(step) + ": " + e.get_message(); };
  if (auto e = g.validate(); !e.is_good()) return failed("validate", e);
  if (auto e = g.build_operation_graph(h); !e.is_good()) return failed("build_operation_graph", e);
  if (auto e = g.create_execution_plans({fe::HeurMode_t::A}); !e.is_good()) return failed("create_execution_plans", e);
  if (auto e = g.check_support(h); !e.is_good()) return failed("check_support", e);
  if (auto e = g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); !e.is_good()) return failed("build_plans", e);
  if (auto e = g.get_workspace_size(workspace); !e.is_good()) return failed("get_workspace_size", e);
  return {};
}

CachedGraph make_forward(const AttentionPlan& p, DType dtype, cudnnHandle_t h) {
  CachedGraph c{new_graph(dtype), 0, {}};
  fe::graph::Graph& g = *c.graph;
  auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(p.scale);
  if (p.causal) options.set_causal_mask(true);
  if (p.has_bias) options.set_bias(input(g, "bias", kBias, p.bias));
  auto [out, stats] = g.sdpa(input(g, "q", kQ, p.q), input(g, "k", kK, p.k), input(g, "v", kV, p.v), options);
  output(out, kOut, p.out);
  output(stats, kStats, p.stats);
  stats->set_data_type(fe::DataType_t::FLOAT);
  c.error = build(g, h, c.workspace);
  return c;
}

CachedGraph make_backward(const AttentionPlan& p, DType dtype, cudnnHandle_t h) {
  CachedGraph c{new_graph(dtype), 0, {}};
  fe::graph::Graph& g = *c.graph;
  auto options = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(p.scale);
  if (p.causal) options.set_causal_mask(true);
  if (p.has_bias) options.set_bias(input(g, "bias", kBias, p.bias));
  auto stats = input(g, "stats", kStats, p.stats);
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto [dq, dk, dv] = g.sdpa_backward(input(g, "q", kQ, p.q), input(g, "k", kK, p.k), input(g, "v", kV, p.v),
                                      input(g, "out", kOut, p.out), input(g, "grad_out", kGradOut, p.out), stats,
                                      options);
  output(dq, kGradQ, p.dq);
  output(dk, kGradK, p.dk);
  output(dv, kGradV, p.dv);
  c.error = build(g, h, c.workspace);
  return c;
}

/// The cached graph of this call and direction (built on first use), or
/// nullptr when cuDNN does not take it.
const CachedGraph* graph_for(const AttentionArgs& a, const AttentionPlan& p, int device, bool backward,
                             cudnnHandle_t h) {
  thread_local std::map<GraphKey, CachedGraph> graphs;
  GraphKey key = key_of(p, device, a.q.dtype(), backward);
  auto it = graphs.find(key);
  if (it == graphs.end()) {
    if (graphs.size() >= kMaxGraphs) graphs.clear();
    CachedGraph c = backward ? make_backward(p, a.q.dtype(), h) : make_forward(p, a.q.dtype(), h);
    it = graphs.emplace(std::move(key), std::move(c)).first;
  }
  return it->second.error.empty() ? &it->second : nullptr;
}

Tensor workspace(int64_t bytes, int device) {
  if (bytes <= 0) return Tensor();
  return empty(Shape{bytes}, DType::bool_, Device::cuda(device));
}

void execute(const CachedGraph& c, cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack, int device) {
  const Tensor ws = workspace(c.workspace, device);
  if (auto e = c.graph->execute(h, pack, ws.defined() ? ws.raw_data() : nullptr); !e.is_good())
    throw DeviceError(std::string(kOp) + ": cuDNN could not run its attention graph: " + e.get_message());
  ++g_runs;
}

/// What cuDNN takes: the plan's conditions and a GPU that has the kernels.
bool takes(const AttentionArgs& a, int device) {
  return cuda_plan::attention_unsupported(a).empty() && fused_attention_available(device);
}

}  // namespace

bool fused_attention_available(int device) {
  return compute_capability(device) >= 80;  // Ampere or later
}

bool attention_forward(const AttentionArgs& a, const AttentionOutputs& o) {
  const int device = a.q.device().index();
  if (!takes(a, device)) return false;
  DeviceGuard guard(device);
  const cudnnHandle_t h = cudnn_handle(device, kOp);
  const AttentionPlan p = cuda_plan::make_attention_plan(a);
  const CachedGraph* c = graph_for(a, p, device, /*backward=*/false, h);
  if (c == nullptr) return false;
  const Tensor bias = p.has_bias ? cuda_plan::dense_bias(a, a.q.dtype()) : Tensor();
  std::unordered_map<int64_t, void*> pack{{kQ, a.q.raw_data()},     {kK, a.k.raw_data()},
                                          {kV, a.v.raw_data()},     {kOut, o.out.raw_data()},
                                          {kStats, o.lse.raw_data()}};
  if (p.has_bias) pack.emplace(kBias, bias.raw_data());
  execute(*c, h, pack, device);
  return true;
}

bool attention_backward(const AttentionArgs& a, const AttentionOutputs& saved, const Tensor& grad_out,
                              const AttentionGrads& grads) {
  const int device = a.q.device().index();
  if (!takes(a, device)) return false;
  DeviceGuard guard(device);
  const cudnnHandle_t h = cudnn_handle(device, kOp);
  const AttentionPlan p = cuda_plan::make_attention_plan(a);
  const CachedGraph* c = graph_for(a, p, device, /*backward=*/true, h);
  if (c == nullptr) return false;
  const Tensor bias = p.has_bias ? cuda_plan::dense_bias(a, a.q.dtype()) : Tensor();
  // cuDNN writes all three gradients: the unwanted ones go to scratch.
  auto target = [&](const Tensor& want, const Tensor& like, const GraphDesc4& d) {
    return want.defined() ? want : empty(Shape{d.dims[0], d.dims[1], d.dims[2], d.dims[3]}, like.dtype(), like.device());
  };
  const Tensor dq = target(grads.q, a.q, p.dq), dk = target(grads.k, a.k, p.dk), dv = target(grads.v, a.v, p.dv);
  std::unordered_map<int64_t, void*> pack{
      {kQ, a.q.raw_data()},          {kK, a.k.raw_data()},         {kV, a.v.raw_data()},
      {kOut, saved.out.raw_data()},  {kStats, saved.lse.raw_data()}, {kGradOut, grad_out.raw_data()},
      {kGradQ, dq.raw_data()},       {kGradK, dk.raw_data()},      {kGradV, dv.raw_data()}};
  if (p.has_bias) pack.emplace(kBias, bias.raw_data());
  execute(*c, h, pack, device);
  return true;
}

}  // namespace mixgrad::backend::cuda

// The frontend's headers hold one engine built at run time by NVRTC (an
// experimental RmsNorm + SiLU fusion for sm100), which mixgrad never asks
// for. These definitions, hidden inside libmixgrad, make it report NVRTC
// unavailable instead of making NVRTC a link and run-time dependency of every
// CUDA build; a program's own NVRTC is untouched (nothing is exported).
#include <nvrtc.h>

#define MIXGRAD_NO_NVRTC extern "C" __attribute__((visibility("hidden"))) nvrtcResult
MIXGRAD_NO_NVRTC nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}
MIXGRAD_NO_NVRTC nvrtcDestroyProgram(nvrtcProgram*) { return NVRTC_ERROR_INTERNAL_ERROR; }
MIXGRAD_NO_NVRTC nvrtcCompileProgram(nvrtcProgram, int, const char* const*) { return NVRTC_ERROR_INTERNAL_ERROR; }
MIXGRAD_NO_NVRTC nvrtcGetCUBINSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INTERNAL_ERROR; }
MIXGRAD_NO_NVRTC nvrtcGetCUBIN(nvrtcProgram, char*) { return NVRTC_ERROR_INTERNAL_ERROR; }
MIXGRAD_NO_NVRTC nvrtcGetProgramLogSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INTERNAL_ERROR; }
MIXGRAD_NO_NVRTC nvrtcGetProgramLog(nvrtcProgram, char*) { return NVRTC_ERROR_INTERNAL_ERROR; }
#undef MIXGRAD_NO_NVRTC

#else  // built without the cuDNN frontend: the composed math runs every call

namespace mixgrad::backend::cuda {

bool fused_attention_available(int) { return false; }
bool attention_forward(const AttentionArgs&, const AttentionOutputs&) { return false; }
bool attention_backward(const AttentionArgs&, const AttentionOutputs&, const Tensor&, const AttentionGrads&) {
  return false;
}

}  // namespace mixgrad::backend::cuda

#endif

namespace mixgrad::backend::cuda {

MIXGRAD_CUDA_KERNEL(attention_forward, attention_forward);
MIXGRAD_CUDA_KERNEL(attention_backward, attention_backward);

}  // namespace mixgrad::backend::cuda
