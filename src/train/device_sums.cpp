#include "train/device_sums.hpp"

#include "mixgrad/functional.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mixgrad::train::detail {

void DeviceSums::add(const std::string& key, const Tensor& value, double weight) {
  Tensor v = value.detach().reshape(Shape{}).to(DType::float64);
  if (weight != 1.0) v = v * weight;
  auto it = sums_.find(key);
  if (it == sums_.end()) {
    const auto h = host_.find(key);
    Tensor start = scalar(h == host_.end() ? 0.0 : h->second, DType::float64, v.device());
    it = sums_.emplace(key, start).first;
  }
  it->second = it->second + v;
}

void DeviceSums::flush() {
  for (const auto& [key, sum] : sums_) host_[key] = sum.item<double>();
}

}  // namespace mixgrad::train::detail
