// What core::describe says of a tensor, kept by value: an error made later
// (a deferred status check) names the tensors as they were, without making
// its text before it is needed or holding on to the tensors.
//
//   backend::check_status(status, [in = core::Description(input)](const int64_t* st) {
//     if (st[0] >= 0) throw ValueError("bad label for " + in.str());
//   });
#pragma once

#include <string>

#include "mixgrad/tensor.hpp"

namespace mixgrad::core {

class Description {
 public:
  explicit Description(const Tensor& t);
  /// "float32[2, 3]", "bfloat16[4]@cuda:0", "undefined": core::describe(t).
  std::string str() const;

 private:
  bool defined_ = false;
  DType dtype_{};
  Shape shape_;
  Device device_;
};

}  // namespace mixgrad::core
