// The device seam. Each op family has a header in backend/ that declares, once
// per dispatched function, a stub of that name, the argument whose device
// picks the kernel, and its signature (PyTorch's DECLARE_DISPATCH):
//
//   /// out = a · b (+ bias). Runs on out's device: argument 3.
//   MIXGRAD_STUB(matmul, 3, void(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out));
//
// and callers write `backend::matmul(a, b, bias, out)`: one indirect call to
// the kernel of that argument's device (a Tensor, or a struct with a
// `device_of` overload next to it). The kernels:
//
//   cpu/matmul.cpp    defines the stub with its CPU kernel, so every stub has
//                     one (the stub is constant-initialised, before any code runs):
//                       MIXGRAD_CPU_KERNEL(matmul, cpu::matmul);
//   cuda/matmul.cpp   registers the CUDA kernel while the library loads:
//                       MIXGRAD_CUDA_KERNEL(matmul, matmul);
//
// (as PyTorch's REGISTER_DISPATCH: the type, the device argument and the
// name are those of the declaration, written once).
//
// A stub with no CUDA kernel (or a build without the CUDA backend) throws
// DeviceError naming the op for CUDA tensors. tests/core/test_dispatch.cpp
// checks which stubs have which kernels. The CUDA registrations are objects
// nothing references: they run because libmixgrad is a shared library (every
// object file is in it); a static one would need --whole-archive (the test fails).
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

#include "mixgrad/error.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::backend {

/// Throws DeviceError: `op` has no CUDA implementation in this build.
[[noreturn]] void throw_no_cuda(const char* op);

/// The device a tensor argument picks. Family headers overload it for their
/// argument structs.
inline Device device_of(const Tensor& t) { return t.device(); }

template <class Fn, std::size_t DeviceArg>
class Stub;

/// One dispatched function: a kernel per device type, called with the
/// arguments as given; argument `DeviceArg` picks the device.
template <class R, class... Args, std::size_t DeviceArg>
class Stub<R(Args...), DeviceArg> {
  static_assert(DeviceArg < sizeof...(Args), "the device argument is one of the arguments");

 public:
  using Kernel = R(Args...);

  constexpr Stub(const char* name, Kernel* cpu_kernel) : name_(name), cpu_(cpu_kernel) {
    if (cpu_kernel == nullptr) throw "a Stub is defined with its CPU kernel";  // at compile time (constinit)
  }
  Stub(const Stub&) = delete;
  Stub& operator=(const Stub&) = delete;

  R operator()(Args... args) const {
    Kernel* kernel = device_of(std::get<DeviceArg>(std::tie(args...))).is_cpu() ? cpu_ : cuda_;
    if (kernel == nullptr) [[unlikely]]
      throw_no_cuda(name_);
    return kernel(std::forward<Args>(args)...);
  }

  const char* name() const { return name_; }
  bool has_kernel(DeviceType type) const { return (type == DeviceType::cpu ? cpu_ : cuda_) != nullptr; }
  void set_cuda_kernel(Kernel* kernel) { cuda_ = kernel; }

 private:
  const char* name_;
  Kernel* cpu_;
  Kernel* cuda_ = nullptr;
};

/// Registers a stub's CUDA kernel when its object is initialised (at load
/// time, for a namespace-scope object in the CUDA file).
struct CudaKernel {
  template <class Fn, std::size_t DeviceArg>
  CudaKernel(Stub<Fn, DeviceArg>& stub, Fn* kernel) {
    stub.set_cuda_kernel(kernel);
  }
};

}  // namespace mixgrad::backend

/// Declares the stub `name` (in its family's header): argument `device_arg`
/// (from 0) of the signature `...` picks the device whose kernel runs.
#define MIXGRAD_STUB(name, device_arg, ...) extern constinit ::mixgrad::backend::Stub<__VA_ARGS__, device_arg> name

/// Defines `stub`, declared in its family's header, with its CPU kernel (in
/// the family's cpu/ file, inside namespace mixgrad::backend). The stub's
/// type and device argument come from that declaration, and its name in
/// messages is the stub's own, so each is written once:
///
///   MIXGRAD_CPU_KERNEL(conv2d_forward, cpu::conv2d_forward);
#define MIXGRAD_CPU_KERNEL(stub, kernel) constinit decltype(::mixgrad::backend::stub) stub{#stub, kernel}

/// Registers `kernel` as `stub`'s CUDA kernel at load time (in the family's
/// cuda/ file):
///
///   MIXGRAD_CUDA_KERNEL(conv2d_forward, conv2d_forward);
#define MIXGRAD_CUDA_KERNEL(stub, kernel) \
  const ::mixgrad::backend::CudaKernel stub##_on_cuda { ::mixgrad::backend::stub, kernel }
