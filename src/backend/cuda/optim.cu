// CUDA optimizer updates (backend/optim.hpp): the kernels/optim.hpp rules in
// a grid-stride loop over (param, grad, state...), any strides. The step
// count and the found-inf flag are read by the kernel, not the host: a
// flagged step returns at once on the device, the bias corrections of Adam
// are formed from the device's count, and a one-thread kernel queued after
// the update advances the count unless the step was skipped. So an AMP step
// queues its optimizer work without waiting for the overflow check.
//
// The two mixed-precision parts of a step (backend::UpdateOperands) go through
// kernels::apply_update, as on the CPU: the inverse loss scale is read by the
// kernel from its one-element float64 device tensor (a GradScaler's unscale
// fused into the update, no host read), and a 16-bit parameter's float32
// master copy is one more operand of the strided walk, updated in place with
// its rounding written to the parameter in the same pass. Both are runtime
// operands (a null pointer when absent), not template parameters, so they add
// no kernel instantiations.
#include <cuda_runtime_api.h>

#include <array>
#include <utility>

#include "backend/copy.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/optim.hpp"
#include "backend/optim_rules.hpp"
#include "kernels/cast.hpp"
#include "kernels/optim.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::StridedIndexer;
using optim_rules::state_t;
using optim_rules::visit_param_grad;

__device__ bool flagged(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

// Builds the step's rule on the device from its count, with the lr read
// from the device when a scheduler keeps it there (`lr` not null).
template <class C>
struct SgdMaker {
  C lr, weight_decay, momentum, one_minus_dampening;
  bool nesterov;
  __device__ kernels::SgdMomentumRule<C> operator()(int64_t count, const double* device_lr) const {
    return {device_lr != nullptr ? C(*device_lr) : lr, weight_decay, momentum, one_minus_dampening, nesterov,
            count == 0};
  }
};

template <class C>
struct PlainSgdMaker {
  C lr, weight_decay;
  __device__ kernels::SgdRule<C> operator()(int64_t, const double* device_lr) const {
    return {device_lr != nullptr ? C(*device_lr) : lr, weight_decay};
  }
};

// Adam's rule from the device's count, with the bias corrections the CPU
// forms on the host (optim_rules::adam_rule).
template <class C>
struct AdamRuleMaker {
  AdamStep s;
  __device__ kernels::AdamRule<C> operator()(int64_t count, const double* device_lr) const {
    AdamStep t = s;
    if (device_lr != nullptr) t.lr = *device_lr;
    return optim_rules::adam_rule<C>(t, count);
  }
};

template <class C>
struct AmsgradRuleMaker {
  AdamRuleMaker<C> adam;
  __device__ kernels::AmsgradRule<C> operator()(int64_t count, const double* device_lr) const {
    return {adam(count, device_lr)};
  }
};

// Operands of the walk: 0 the parameter, 1 its master copy (null without),
// 2 the gradient, 3... the state buffers.
constexpr int kFixedOperands = 3;

template <class P, class G, class C, int K, class Rule, size_t... I>
__device__ void update_one(const StridedIndexer<kFixedOperands + K>& ix, char* const* ptr, int64_t i,
                           const Rule& rule, C inv_scale, std::index_sequence<I...>) {
  int64_t off[kFixedOperands + K];
  ix.offsets(i, off);
  P& p = *reinterpret_cast<P*>(ptr[0] + off[0]);
  C* master = ptr[1] != nullptr ? reinterpret_cast<C*>(ptr[1] + off[1]) : nullptr;
  const G g = *reinterpret_cast<const G*>(ptr[2] + off[2]);
  kernels::apply_update(rule, inv_scale, p, master, g, *reinterpret_cast<C*>(ptr[3 + I] + off[3 + I])...);
}

template <int N>
struct Pointers {
  char* p[N];
};

// inv_scale: the factor the gradient is multiplied by, rounded once to C as
// the CPU does (null for 1).
template <class P, class G, class C, int K, class Maker>
__global__ void update_kernel(StridedIndexer<kFixedOperands + K> ix, Pointers<kFixedOperands + K> ptr, int64_t n,
                              Maker maker, const int64_t* step, const float* found_inf, const double* inv_scale,
                              const double* lr) {
  if (flagged(found_inf)) return;
  const auto rule = maker(*step, lr);
  const C factor = inv_scale != nullptr ? C(*inv_scale) : C(1);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    update_one<P, G, C, K>(ix, ptr.p, i, rule, factor, std::make_index_sequence<K>());
}

// Queued after the update, so every block has read the count first.
__global__ void advance_step_kernel(int64_t* step, const float* found_inf) {
  if (!flagged(found_inf)) ++*step;
}

template <class P, class G, class C, int K, class Maker>
void launch_update(const Tensor& param, const Tensor& grad, const std::array<Tensor, K>& state, const Maker& maker,
                   const Tensor& step, const Tensor& found_inf, const UpdateOperands& amp, const char* op) {
  constexpr int N = kFixedOperands + K;
  constexpr bool k16 = std::is_same_v<P, half> || std::is_same_v<P, bfloat16>;
  const bool with_master = k16 && amp.master.defined();  // ignored for other dtypes, as on the CPU
  std::array<Shape, N> strides{byte_strides(param), byte_strides(with_master ? amp.master : param),
                               byte_strides(grad)};
  Pointers<N> ptr{};
  ptr.p[0] = static_cast<char*>(param.raw_data());
  ptr.p[1] = with_master ? static_cast<char*>(amp.master.raw_data()) : nullptr;
  ptr.p[2] = static_cast<char*>(grad.raw_data());
  for (int k = 0; k < K; ++k) {
    if (state[k].shape() != param.shape() || state[k].dtype() != dtype_of<C>() || state[k].device() != param.device())
      throw_mismatch(op, param, state[k]);
    strides[3 + k] = byte_strides(state[k]);
    ptr.p[3 + k] = static_cast<char*>(state[k].raw_data());
  }
  const auto ix = cuda_plan::make_indexer<N>(param.shape(), strides);
  const int device = param.device().index();
  const cudaStream_t stream = current_stream(device);
  const float* flag = found_inf.defined() ? static_cast<const float*>(found_inf.raw_data()) : nullptr;
  auto* count = static_cast<int64_t*>(step.raw_data());
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(param.numel());
  if (lc.blocks != 0) {
    update_kernel<P, G, C, K, Maker><<<lc.blocks, lc.threads, 0, stream>>>(
        ix, ptr, param.numel(), maker, count, flag,
        amp.inv_scale.defined() ? static_cast<const double*>(amp.inv_scale.raw_data()) : nullptr,
        amp.lr.defined() ? static_cast<const double*>(amp.lr.raw_data()) : nullptr);
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
  }
  advance_step_kernel<<<1, 1, 0, stream>>>(count, flag);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void check_operands(const char* op, const Tensor& param, const Tensor& grad, const Tensor& step,
                    const Tensor& found_inf, const UpdateOperands& amp) {
  if (amp.inv_scale.defined() && (amp.inv_scale.numel() != 1 || amp.inv_scale.dtype() != DType::float64 ||
                                  amp.inv_scale.device() != param.device()))
    throw StateError(std::string(op) + ": inv_scale must be a one-element float64 tensor on " +
                     to_string(param.device()) + ", got " + std::string(to_string(amp.inv_scale.dtype())) +
                     to_string(amp.inv_scale.shape()) + " on " + to_string(amp.inv_scale.device()));
  if (amp.master.defined() && (param.dtype() == DType::float16 || param.dtype() == DType::bfloat16) &&
      (amp.master.shape() != param.shape() || amp.master.dtype() != DType::float32 ||
       amp.master.device() != param.device()))
    throw_mismatch(op, param, amp.master);
  if (amp.lr.defined() &&
      (amp.lr.numel() != 1 || amp.lr.dtype() != DType::float64 || amp.lr.device() != param.device()))
    throw StateError(std::string(op) + ": the lr must be a one-element float64 tensor on " +
                     to_string(param.device()) + ", got " + std::string(to_string(amp.lr.dtype())) +
                     to_string(amp.lr.shape()) + " on " + to_string(amp.lr.device()));
  if (grad.shape() != param.shape() || grad.device() != param.device()) throw_mismatch(op, param, grad);
  if (step.numel() != 1 || step.dtype() != DType::int64 || step.device() != param.device())
    throw StateError(std::string(op) + ": the step count must be a one-element int64 tensor on " +
                     to_string(param.device()) + ", got " + std::string(to_string(step.dtype())) +
                     to_string(step.shape()) + " on " + to_string(step.device()));
  if (found_inf.defined() &&
      (found_inf.numel() != 1 || found_inf.dtype() != DType::float32 || found_inf.device() != param.device()))
    throw StateError(std::string(op) + ": found_inf must be a one-element float32 tensor on " +
                     to_string(param.device()));
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& step,
                const Tensor& found_inf, const SgdStep& s, const UpdateOperands& amp) {
  check_operands("sgd_update", param, grad, step, found_inf, amp);
  DeviceGuard guard(param.device().index());
  visit_param_grad(param, grad, "sgd_update", [&]<class P, class G>() {
    using C = state_t<P>;
    if (!momentum_buffer.defined()) {
      launch_update<P, G, C, 0>(param, grad, {}, PlainSgdMaker<C>{C(s.lr), C(s.weight_decay)}, step, found_inf, amp,
                                "sgd_update");
      return;
    }
    const SgdMaker<C> maker{C(s.lr), C(s.weight_decay), C(s.momentum), C(1.0 - s.dampening), s.nesterov};
    launch_update<P, G, C, 1>(param, grad, {momentum_buffer}, maker, step, found_inf, amp, "sgd_update");
  });
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const Tensor& step, const Tensor& found_inf, const AdamStep& s,
                 const UpdateOperands& amp) {
  check_operands("adam_update", param, grad, step, found_inf, amp);
  DeviceGuard guard(param.device().index());
  visit_param_grad(param, grad, "adam_update", [&]<class P, class G>() {
    using C = state_t<P>;
    if (max_exp_avg_sq.defined()) {
      launch_update<P, G, C, 3>(param, grad, {exp_avg, exp_avg_sq, max_exp_avg_sq}, AmsgradRuleMaker<C>{{s}}, step,
                                found_inf, amp, "adam_update");
    } else {
      launch_update<P, G, C, 2>(param, grad, {exp_avg, exp_avg_sq}, AdamRuleMaker<C>{s}, step, found_inf,
                                amp, "adam_update");
    }
  });
}

// One thread: the count is read, advanced and used in order.
__global__ void advance_schedule_kernel(int64_t* epoch, double* lrs, int64_t lr_stride, const double* bases,
                                        int64_t base_stride, int64_t groups, const float* found_inf,
                                        kernels::ScheduleProgram program, bool advance) {
  if (advance && !flagged(found_inf)) ++*epoch;
  for (int64_t g = 0; g < groups; ++g) lrs[g * lr_stride] = program.lr(*epoch, bases[g * base_stride]);
}

void advance_schedule(const Tensor& epoch, const Tensor& lrs, const Tensor& bases, const Tensor& found_inf,
                      const kernels::ScheduleProgram& program, bool advance) {
  DeviceGuard guard(epoch.device().index());
  const float* flag = found_inf.defined() ? static_cast<const float*>(found_inf.raw_data()) : nullptr;
  advance_schedule_kernel<<<1, 1, 0, current_stream(epoch.device().index())>>>(
      static_cast<int64_t*>(epoch.raw_data()), static_cast<double*>(lrs.raw_data()), lrs.strides()[0],
      static_cast<const double*>(bases.raw_data()), bases.strides()[0], lrs.numel(), flag, program, advance);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

MIXGRAD_CUDA_KERNEL(advance_schedule, advance_schedule);
MIXGRAD_CUDA_KERNEL(sgd_update, sgd_update);
MIXGRAD_CUDA_KERNEL(adam_update, adam_update);

}  // namespace mixgrad::backend::cuda
