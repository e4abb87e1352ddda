// Megatron-LM's pair of tensor-parallel regions: "f"
// (copy_to_parallel_region: the identity forward, the gradient all-reduced
// with the recorded all_reduce_sum) and "g" (reduce_from_parallel_region:
// the recorded all_reduce_sum forward, the identity backward).
#include <string>

#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/autodiff/function.hpp"
#include "mixgrad/distributed/functional.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::distributed::functional {

namespace {

class CopyToParallelRegionFn final : public autodiff::Function {
 public:
  explicit CopyToParallelRegionFn(const ProcessGroup& group) : group_(group) {}
  std::string name() const override { return "distributed::functional::copy_to_parallel_region"; }
  // A new handle on the same memory: no copy.
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0].detach()}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& dy) override {
    amp::autocast off(false);
    return {all_reduce_sum(group_, dy[0])};
  }

 private:
  ProcessGroup group_;
};

class ReduceFromParallelRegionFn final : public autodiff::Function {
 public:
  explicit ReduceFromParallelRegionFn(const ProcessGroup& group) : group_(group) {}
  std::string name() const override { return "distributed::functional::reduce_from_parallel_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    amp::autocast off(false);
    return {all_reduce_sum(group_, in[0])};  // unrecorded here: apply records this Function
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& dy) override { return {dy[0]}; }

 private:
  ProcessGroup group_;
};

}  // namespace

Tensor copy_to_parallel_region(const ProcessGroup& group, const Tensor& x) {
  if (!x.defined()) throw ValueError("distributed::functional::copy_to_parallel_region: x is undefined");
  return autodiff::apply(std::make_shared<CopyToParallelRegionFn>(group), {x})[0];
}

Tensor reduce_from_parallel_region(const ProcessGroup& group, const Tensor& x) {
  if (!x.defined()) throw ValueError("distributed::functional::reduce_from_parallel_region: x is undefined");
  return autodiff::apply(std::make_shared<ReduceFromParallelRegionFn>(group), {x})[0];
}

}  // namespace mixgrad::distributed::functional
