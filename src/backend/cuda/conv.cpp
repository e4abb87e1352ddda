// CUDA 2-d convolutions (forward, backward-data, backward-weights) through
// cuDNN 9's legacy convolution API (cudnnConvolutionForward and its two
// backward calls). The legacy API, not the graph API: a fixed 2-d
// convolution needs three descriptors and one call, the heuristic
// (cudnnGet*Algorithm_v7) picks among the same engines, and there is no
// operation graph to build, finalise and cache per shape. The descriptor
// parameters come from the pure plan of cuda/conv_plan.hpp, which the host
// tests run with a reference loop against the CPU convolution.
//
// Math: float16 / bfloat16 with float32 accumulation (the convolution
// descriptor's compute type) on the tensor cores (CUDNN_TENSOR_OP_MATH);
// float32 with FMA math only (no TF32, as the matmul family, so results match
// the CPU's float32 within summation order); float64 in double.
//
// Caches: a cuDNN handle per (thread, device), its stream set to the current
// stream before each call; per thread, the descriptors and the heuristic's
// algorithm of each (device, shapes, geometry, dtype, direction). Workspace
// from the caching allocator, per call (the allocator ties it to the stream,
// so freeing it after the launch is safe and re-using it costs nothing).
#include "backend/conv.hpp"

#if MIXGRAD_WITH_CUDNN

#include <cudnn.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "backend/copy.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/conv_plan.hpp"
#include "backend/cuda/cudnn_handle.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/elementwise.hpp"
#include "backend/reduction.hpp"

namespace mixgrad::backend::cuda {

namespace {

/// Largest workspace a chosen algorithm may ask for.
constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

void check_dnn(cudnnStatus_t status, const char* call) { check_cudnn(status, "conv2d", call); }
#define MIXGRAD_CUDNN_CHECK(call) check_dnn((call), #call)

cudnnHandle_t handle(int device) { return cudnn_handle(device, "conv2d"); }

struct Types {
  cudnnDataType_t data, compute;
  cudnnMathType_t math;
};

Types types_of(DType t, const char* op, const Tensor& out) {
  switch (t) {
    case DType::float32: return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH};
    case DType::float16: return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH};
    case DType::bfloat16: return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH};
    case DType::float64: return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH};
    default:
      throw DTypeError(std::string(op) + ": no CUDA kernel for dtype " + std::string(to_string(t)) + " (output " +
                       to_string(out.shape()) + "); use a floating dtype");
  }
}

enum class Direction : int { forward, backward_data, backward_weights };

struct Key {
  std::array<int, 19> v{};  // device, x dims, w dims, pad, stride, dilation, groups, direction
  DType dtype = DType::float32;
  bool operator<(const Key& o) const { return std::tie(v, dtype) < std::tie(o.v, o.dtype); }
};

// Descriptors and the chosen algorithm of one problem and direction.
struct Entry {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;  // the direction's algorithm enum
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // the math type the algorithm was chosen with
  size_t workspace = 0;
  ~Entry() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

cudnnTensorDescriptor_t tensor_desc(cudnnDataType_t type, const cuda_plan::Desc4& d) {
  cudnnTensorDescriptor_t t = nullptr;
  MIXGRAD_CUDNN_CHECK(cudnnCreateTensorDescriptor(&t));
  MIXGRAD_CUDNN_CHECK(cudnnSetTensorNdDescriptor(t, type, 4, d.dims.data(), d.strides.data()));
  return t;
}

// Takes the heuristic's first usable result. Its math type goes on the
// convolution descriptor with it: cuDNN decides whether an algorithm runs on
// the tensor cores from the (algorithm, math type) pair, and a result may come
// with another math type than the one requested. float32 (requested: FMA)
// takes FMA results only, so no TF32 kernel is ever chosen.
template <class Perf, class Find>
void pick(Entry& e, const Types& t, int count, Find&& find, const char* call) {
  std::array<Perf, 16> perf{};
  int returned = 0;
  check_dnn(find(static_cast<int>(perf.size()) < count ? static_cast<int>(perf.size()) : count, &returned,
                 perf.data()),
            call);
  const int i = cuda_plan::usable_algorithm(perf.data(), returned, CUDNN_STATUS_SUCCESS, kMaxWorkspaceBytes,
                                            t.math == CUDNN_FMA_MATH ? static_cast<int>(CUDNN_FMA_MATH) : -1);
  if (i >= 0) {
    e.algo = static_cast<int>(perf[i].algo);
    e.workspace = perf[i].memory;
    e.math = perf[i].mathType;
    MIXGRAD_CUDNN_CHECK(cudnnSetConvolutionMathType(e.conv, e.math));
    return;
  }
  throw DeviceError(std::string("conv2d: cuDNN's heuristic ") + call + " offers no algorithm for this problem");
}

std::unique_ptr<Entry> make_entry(const cuda_plan::ConvDescPlan& p, const Types& t, Direction dir,
                                  cudnnHandle_t h) {
  auto e = std::make_unique<Entry>();
  e->x = tensor_desc(t.data, p.x);
  e->y = tensor_desc(t.data, p.y);
  MIXGRAD_CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->w));
  MIXGRAD_CUDNN_CHECK(cudnnSetFilterNdDescriptor(e->w, t.data, p.filter_nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                 4, p.w.data()));
  MIXGRAD_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&e->conv));
  MIXGRAD_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(e->conv, 2, p.pad.data(), p.stride.data(),
                                                      p.dilation.data(), CUDNN_CROSS_CORRELATION, t.compute));
  MIXGRAD_CUDNN_CHECK(cudnnSetConvolutionGroupCount(e->conv, p.groups));
  MIXGRAD_CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, t.math));
  switch (dir) {
    case Direction::forward: {
      int count = 0;
      MIXGRAD_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
      pick<cudnnConvolutionFwdAlgoPerf_t>(
          *e, t, count,
          [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* perf) {
            return cudnnGetConvolutionForwardAlgorithm_v7(h, e->x, e->w, e->conv, e->y, n, r, perf);
          },
          "cudnnGetConvolutionForwardAlgorithm_v7");
      break;
    }
    case Direction::backward_data: {
      int count = 0;
      MIXGRAD_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
      pick<cudnnConvolutionBwdDataAlgoPerf_t>(
          *e, t, count,
          [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, e->w, e->y, e->conv, e->x, n, r, perf);
          },
          "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      break;
    }
    case Direction::backward_weights: {
      int count = 0;
      MIXGRAD_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
      pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
          *e, t, count,
          [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
            return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, e->x, e->y, e->conv, e->w, n, r, perf);
          },
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      break;
    }
  }
  return e;
}

// The cached entry of (x, w, y, p) in direction dir on out's device; x and
// y channels-last (NHWC in memory) when either is not contiguous, the
// filter OHWI when w is not.
Entry& entry(const Tensor& xt, const Tensor& wt, const Tensor& yt, const Conv2dParams& p, Direction dir,
             const Types& t, DType dtype, int device, cudnnHandle_t h) {
  const bool channels_last = !xt.is_contiguous() || !yt.is_contiguous(), filter_nhwc = !wt.is_contiguous();
  const cuda_plan::ConvDescPlan plan =
      cuda_plan::make_conv_desc_plan(xt.shape(), wt.shape(), yt.shape(), p, channels_last, filter_nhwc);
  Key key;
  key.v = {device,         plan.x.dims[0], plan.x.dims[1], plan.x.dims[2], plan.x.dims[3], plan.w[0], plan.w[1],
           plan.w[2],      plan.w[3],      plan.pad[0],    plan.pad[1],    plan.stride[0], plan.stride[1],
           plan.dilation[0], plan.dilation[1], plan.groups, static_cast<int>(dir), channels_last ? 1 : 0,
           filter_nhwc ? 1 : 0};
  key.dtype = dtype;
  thread_local std::map<Key, std::unique_ptr<Entry>> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_entry(plan, t, dir, h)).first;
  return *it->second;
}

// Workspace of `bytes` from the caching allocator on the current stream
// (undefined for 0 bytes); alive until the caller's call is enqueued.
Tensor workspace(size_t bytes, int device) {
  if (bytes == 0) return Tensor();
  return empty(Shape{static_cast<int64_t>(bytes)}, DType::bool_, Device::cuda(device));
}

void check_operands(const char* op, const Tensor& out, std::initializer_list<const Tensor*> ins) {
  for (const Tensor* t : ins) {
    if (t->device() != out.device())
      throw DeviceError(std::string(op) + ": operand " + std::string(to_string(t->dtype())) + to_string(t->shape()) +
                        " on " + to_string(t->device()) + ", output on " + to_string(out.device()) +
                        "; move it with Tensor::to(Device) first");
    if (t->dtype() != out.dtype())
      throw DTypeError(std::string(op) + ": operand " + std::string(to_string(t->dtype())) + to_string(t->shape()) +
                       " and output " + std::string(to_string(out.dtype())) + to_string(out.shape()) + " differ");
    if (!t->is_contiguous() && !t->is_contiguous(MemoryFormat::channels_last))
      throw ValueError(std::string(op) + ": operand " + to_string(t->shape()) + " must be contiguous or channels-last");
  }
}

struct Scale {
  float f1 = 1.f, f0 = 0.f;
  double d1 = 1.0, d0 = 0.0;
  bool dbl;
  explicit Scale(DType t) : dbl(t == DType::float64) {}
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : &f0; }
};

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p) {
  const Types t = types_of(y.dtype(), "conv2d_forward", y);
  check_operands("conv2d_forward", y, {&x, &w, &y});
  if (bias.defined() && bias.device() != y.device())
    throw DeviceError("conv2d_forward: bias on " + to_string(bias.device()) + ", output on " + to_string(y.device()));
  if (y.numel() == 0) return;
  const int device = y.device().index();
  DeviceGuard guard(device);
  const cudnnHandle_t h = handle(device);
  const Scale s(y.dtype());
  // The bias is added by the element-wise kernel, as the CPU does (not
  // cudnnAddTensor, whose bfloat16 path nothing here exercised), in y's
  // dtype, broadcast over [N, C, H, W] as a [C, 1, 1] view.
  Tensor b = bias;
  if (b.defined() && (b.dtype() != y.dtype() || !b.is_contiguous())) {
    b = empty(bias.shape(), y.dtype(), y.device());
    backend::copy(bias, b);
  }
  const auto add_bias = [&] {
    const Tensor per_channel = b.reshape(Shape{b.numel(), 1, 1});
    backend::binary(BinaryOp::add, Operand(y), Operand(per_channel), y);
  };
  if (x.numel() == 0 || w.numel() == 0) {
    // A sum of nothing (no input channels, or an empty input that the
    // padding still gives outputs): zeros plus the bias. No cached entry:
    // cuDNN refuses descriptors with an extent of 0, so building one here
    // would throw where the CPU returns the bias.
    backend::fill(y, 0.0);
    if (b.defined()) add_bias();
    return;
  }
  Entry& e = entry(x, w, y, p, Direction::forward, t, y.dtype(), device, h);
  const Tensor ws = workspace(e.workspace, device);
  MIXGRAD_CUDNN_CHECK(cudnnConvolutionForward(h, s.one(), e.x, x.raw_data(), e.w, w.raw_data(), e.conv,
                                              static_cast<cudnnConvolutionFwdAlgo_t>(e.algo),
                                              ws.defined() ? ws.raw_data() : nullptr, e.workspace, s.zero(), e.y,
                                              y.raw_data()));
  if (b.defined()) add_bias();
}

void conv2d_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p) {
  const Types t = types_of(gx.dtype(), "conv2d_backward_data", gx);
  check_operands("conv2d_backward_data", gx, {&gy, &w, &gx});
  if (gx.numel() == 0) return;
  if (gy.numel() == 0 || w.numel() == 0) return backend::fill(gx, 0.0);
  const int device = gx.device().index();
  DeviceGuard guard(device);
  const cudnnHandle_t h = handle(device);
  Entry& e = entry(gx, w, gy, p, Direction::backward_data, t, gx.dtype(), device, h);
  const Scale s(gx.dtype());
  const Tensor ws = workspace(e.workspace, device);
  MIXGRAD_CUDNN_CHECK(cudnnConvolutionBackwardData(h, s.one(), e.w, w.raw_data(), e.y, gy.raw_data(), e.conv,
                                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(e.algo),
                                                   ws.defined() ? ws.raw_data() : nullptr, e.workspace, s.zero(),
                                                   e.x, gx.raw_data()));
}

void conv2d_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gbias,
                             const Conv2dParams& p) {
  const Types t = types_of(gw.dtype(), "conv2d_backward_weights", gw);
  check_operands("conv2d_backward_weights", gw, {&gy, &x, &gw});
  if (gbias.defined() && gbias.device() != gw.device())
    throw DeviceError("conv2d_backward_weights: bias gradient on " + to_string(gbias.device()) + ", weight on " +
                      to_string(gw.device()));
  const int device = gw.device().index();
  DeviceGuard guard(device);
  if (gw.numel() > 0) {
    if (gy.numel() == 0 || x.numel() == 0) {
      backend::fill(gw, 0.0);
    } else {
      const cudnnHandle_t h = handle(device);
      Entry& e = entry(x, gw, gy, p, Direction::backward_weights, t, gw.dtype(), device, h);
      const Scale s(gw.dtype());
      const Tensor ws = workspace(e.workspace, device);
      MIXGRAD_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, s.one(), e.x, x.raw_data(), e.y, gy.raw_data(), e.conv,
                                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(e.algo),
                                                         ws.defined() ? ws.raw_data() : nullptr, e.workspace,
                                                         s.zero(), e.w, gw.raw_data()));
    }
  }
  // The bias gradient: the reduction family's per-channel sum (float32
  // accumulation, one thread per channel column when they are many).
  if (gbias.defined()) {
    Tensor g = gy;  // the per-channel sum reads NCHW: a channels-last gy through a copy
    if (!g.is_contiguous()) {
      g = empty(gy.shape(), gy.dtype(), gy.device());
      backend::copy(gy, g);
    }
    backend::sum_channels(g, gy.shape()[0], gy.shape()[1], gy.shape()[2] * gy.shape()[3], gbias);
  }
}

}  // namespace mixgrad::backend::cuda

#else  // no cuDNN in this build

namespace mixgrad::backend::cuda {

namespace {
[[noreturn]] void no_cudnn(const char* op) {
  throw DeviceError(std::string(op) +
                    ": mixgrad's CUDA backend was built without cuDNN, which CUDA convolutions need (install cuDNN 9 "
                    "beside the CUDA toolkit and reconfigure)");
}
}  // namespace

void conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  no_cudnn("conv2d_forward");
}
void conv2d_backward_data(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  no_cudnn("conv2d_backward_data");
}
void conv2d_backward_weights(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  no_cudnn("conv2d_backward_weights");
}

}  // namespace mixgrad::backend::cuda

#endif

namespace mixgrad::backend::cuda {

MIXGRAD_CUDA_KERNEL(conv2d_forward, conv2d_forward);
MIXGRAD_CUDA_KERNEL(conv2d_backward_data, conv2d_backward_data);
MIXGRAD_CUDA_KERNEL(conv2d_backward_weights, conv2d_backward_weights);

}  // namespace mixgrad::backend::cuda
