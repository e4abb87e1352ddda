#include "core/checks.hpp"

#include "core/description.hpp"

#include "mixgrad/error.hpp"

namespace mixgrad::core {

Description::Description(const Tensor& t) : defined_(t.defined()) {
  if (!defined_) return;
  dtype_ = t.dtype();
  shape_ = t.shape();
  device_ = t.device();
}

std::string Description::str() const {
  if (!defined_) return "undefined";
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) at
  // "@" + std::string once inlined here.
  std::string s = std::string(to_string(dtype_)) + to_string(shape_);
  if (!device_.is_cpu()) s.append("@").append(to_string(device_));
  return s;
}

std::string describe(const Tensor& t) { return Description(t).str(); }

void check_defined(const char* op, std::initializer_list<const Tensor*> inputs) {
  int i = 0;
  for (const Tensor* t : inputs) {
    if (!t->defined()) throw StateError(std::string(op) + ": input " + std::to_string(i) + " is undefined");
    ++i;
  }
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> inputs) {
  const Tensor* first = nullptr;
  for (const Tensor* t : inputs) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
    } else if (t->device() != first->device()) {
      throw DeviceError(std::string(op) + ": tensors on " + to_string(first->device()) + " and " +
                        to_string(t->device()));
    }
  }
}

void check_floating(const char* op, const Tensor& t) {
  if (!is_floating_point(t.dtype()))
    throw DTypeError(std::string(op) + ": expected a floating tensor, got " + describe(t));
}

}  // namespace mixgrad::core
