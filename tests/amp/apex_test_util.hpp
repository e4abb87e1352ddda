// What the tests of apex's front end (amp::initialize, amp::scale_loss) share:
// apex's test model and exact snapshots of parameters, gradients and scalers.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace apextest {

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

/// apex's L0 test model (tests/L0/run_amp/test_checkpointing.py): a
/// parameter, a convolution and a batch norm.
struct ConvNet : nn::Module {
  mg::Tensor param = register_parameter("param", mg::normal({1}));
  std::shared_ptr<nn::Conv2d> conv1 = register_module("conv1", nn::Conv2d(3, 6, 3, {.padding = 1}));
  std::shared_ptr<nn::BatchNorm2d> bn1 = register_module("bn1", nn::BatchNorm2d(6));
  mg::Tensor forward(const mg::Tensor& x) override { return (*bn1)(mg::F::relu((*conv1)(x * param))); }
};

/// A batch for ConvNet, float32.
inline mg::Tensor batch(int64_t n = 4) { return mg::normal({n, 3, 6, 6}); }

/// `x` with its first element set to inf: a loss from it overflows.
inline mg::Tensor poisoned(const mg::Tensor& x) {
  std::vector<double> v = x.to(mg::DType::float64).to_vector<double>();
  v[0] = INFINITY;
  return mg::tensor(v, x.shape(), x.dtype());
}

/// Exact values of tensors (NaN equal to NaN), or of their gradients; an
/// undefined gradient is an empty entry.
struct Values {
  std::vector<std::vector<double>> v;
  std::vector<mg::DType> dtypes;
  bool operator==(const Values& o) const {
    if (dtypes != o.dtypes || v.size() != o.v.size()) return false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].size() != o.v[i].size()) return false;
      for (size_t j = 0; j < v[i].size(); ++j)
        if (!(v[i][j] == o.v[i][j] || (std::isnan(v[i][j]) && std::isnan(o.v[i][j])))) return false;
    }
    return true;
  }
};

inline Values values_of(const std::vector<mg::Tensor>& ts) {
  Values out;
  for (const mg::Tensor& t : ts) {
    out.v.push_back(t.defined() ? t.to(mg::DType::float64).to_vector<double>() : std::vector<double>{});
    out.dtypes.push_back(t.defined() ? t.dtype() : mg::DType::bool_);
  }
  return out;
}

inline Values grads_of(const std::vector<mg::Tensor>& ts) {
  std::vector<mg::Tensor> g;
  for (const mg::Tensor& t : ts) g.push_back(t.grad());
  return values_of(g);
}

/// A state dict's entries as exact doubles, keyed.
inline std::vector<std::pair<std::string, double>> entries(const mg::StateDict& d) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [k, t] : d) out.emplace_back(k, t.item<double>());
  return out;
}

/// True when every value is finite.
inline bool all_finite(const std::vector<mg::Tensor>& ts) {
  for (const auto& v : values_of(ts).v)
    for (double x : v)
      if (!std::isfinite(x)) return false;
  return true;
}

/// The GradScaler settings of apex's dynamic loss scaler.
inline mg::amp::GradScalerOptions apex_dynamic() {
  return {.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 2000,
          .min_scale = std::nullopt, .max_scale = 0x1p24};
}

}  // namespace apextest
