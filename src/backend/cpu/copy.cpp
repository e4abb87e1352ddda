#include "backend/copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

namespace {

template <class From, class To>
void convert_run(const char* s, int64_t ss, char* d, int64_t ds, int64_t n) {
  if (ss == sizeof(From) && ds == sizeof(To)) {
    const From* src = reinterpret_cast<const From*>(s);
    To* dst = reinterpret_cast<To*>(d);
    if constexpr (std::is_same_v<From, To>) {
      std::memcpy(dst, src, n * sizeof(To));
    } else if constexpr ((std::is_same_v<From, float> && (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>)) ||
                         (std::is_same_v<To, float> && (std::is_same_v<From, half> || std::is_same_v<From, bfloat16>))) {
      convert(src, dst, n);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = kernels::cast<To>(src[i]);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<To*>(d + i * ds) = kernels::cast<To>(*reinterpret_cast<const From*>(s + i * ss));
}

// A contiguous block of n values of T as Acc values: in place when T is
// Acc, else converted into buf (bulk conversions for the 16-bit floats).
template <class T, class Acc>
const Acc* acc_block(const T* p, int64_t n, Acc* buf) {
  if constexpr (std::is_same_v<T, Acc>) {
    return p;
  } else {
    convert_run<T, Acc>(reinterpret_cast<const char*>(p), sizeof(T), reinterpret_cast<char*>(buf), sizeof(Acc), n);
    return buf;
  }
}

// d[i] += s[i] over a run. Contiguous runs go in blocks that vectorise: the
// gradient sums of a backward pass (an activation read by two layers, a
// residual connection) are whole contiguous tensors, often bfloat16.
template <class From, class To>
void accumulate_run(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
  using Acc = kernels::compute_t<To>;
  if constexpr (std::is_floating_point_v<Acc> && !std::is_same_v<From, bool>) {
    if (ds == sizeof(To) && ss == sizeof(From)) {
      To* dst = reinterpret_cast<To*>(d);
      const From* src = reinterpret_cast<const From*>(s);
      if constexpr (std::is_same_v<To, Acc> && std::is_same_v<From, Acc>) {
        for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      } else {
        constexpr int64_t kBlock = 256;
        alignas(64) Acc a[kBlock], b[kBlock];
        for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
          const int64_t len = std::min(kBlock, n - i0);
          const Acc* x = acc_block<To, Acc>(dst + i0, len, a);
          const Acc* y = acc_block<From, Acc>(src + i0, len, b);
          for (int64_t i = 0; i < len; ++i) a[i] = x[i] + y[i];
          convert_run<Acc, To>(reinterpret_cast<const char*>(a), sizeof(Acc), reinterpret_cast<char*>(dst + i0),
                               sizeof(To), len);
        }
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    To& dv = *reinterpret_cast<To*>(d + i * ds);
    const From sv = *reinterpret_cast<const From*>(s + i * ss);
    dv = kernels::cast<To>(kernels::cast<Acc>(dv) + kernels::cast<Acc>(sv));
  }
}

}  // namespace

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

void throw_mismatch(const char* op, const Tensor& dst, const Tensor& src) {
  const auto describe = [](const Tensor& t) {
    return std::string(to_string(t.dtype())) + to_string(t.shape()) + " on " + to_string(t.device());
  };
  if (dst.shape() != src.shape())
    throw ShapeError(std::string("backend::") + op + ": source " + describe(src) + " for destination " +
                     describe(dst) + "; the shapes must match");
  throw DeviceError(std::string("backend::") + op + ": source " + describe(src) + " for destination " + describe(dst) +
                    "; the devices must match");
}

}  // namespace mixgrad::backend

namespace mixgrad::backend::cpu {

void copy(const Tensor& src, const Tensor& dst) {
  // Walked in dst's memory order: two channels-last tensors copy in one run.
  Shape shape = dst.shape();
  std::array<Shape, 2> strides{byte_strides(dst), byte_strides(src)};
  kernels::permute_to_walk_order<2>(shape, strides);
  const auto run = [&]<class From, class To>() {
    kernels::for_each_run<2>(shape, strides,
                             {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                             [](std::array<char*, 2> p, const std::array<int64_t, 2>& st, int64_t n) {
                               convert_run<From, To>(p[1], st[1], p[0], st[0], n);
                             });
  };
  // Within one dtype a copy moves stored bits: one loop per element size
  // (float32 and int32 share one), not one per dtype.
  if (src.dtype() == dst.dtype()) {
    switch (element_size(dst.dtype())) {
      case 1: return run.template operator()<uint8_t, uint8_t>();
      case 2: return run.template operator()<uint16_t, uint16_t>();
      case 4: return run.template operator()<uint32_t, uint32_t>();
      default: return run.template operator()<uint64_t, uint64_t>();
    }
  }
  visit_dtype(src.dtype(), [&]<class From>() {
    visit_dtype(dst.dtype(), [&]<class To>() {
      if constexpr (!std::is_same_v<From, To>) run.template operator()<From, To>();
    });
  });
}

namespace {

// d[i] = v for i < n: memset for a value whose bytes are all zero (the
// common case: gradient buffers), and the 16-bit floats as their stored
// bits, a loop GCC vectorises (it left the one over the struct scalar).
template <class T>
void fill_run(T* d, int64_t n, T v) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&v);
  if (std::all_of(bytes, bytes + sizeof(T), [](unsigned char b) { return b == 0; })) {
    std::memset(static_cast<void*>(d), 0, static_cast<size_t>(n) * sizeof(T));
  } else if constexpr (sizeof(T) == 2) {
    uint16_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    std::fill_n(reinterpret_cast<uint16_t*>(d), n, bits);
  } else {
    std::fill_n(d, n, v);
  }
}

}  // namespace

void fill(const Tensor& dst, double value) {
  visit_dtype(dst.dtype(), [&]<class T>() {
    const T v = kernels::cast<T>(value);
    kernels::for_each_run<1>(dst.shape(), {byte_strides(dst)}, {static_cast<char*>(dst.raw_data())},
                             [v](std::array<char*, 1> p, const std::array<int64_t, 1>& st, int64_t n) {
                               if (st[0] == sizeof(T)) {
                                 fill_run(reinterpret_cast<T*>(p[0]), n, v);
                               } else {
                                 for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * st[0]) = v;
                               }
                             });
  });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  visit_dtype(src.dtype(), [&]<class From>() {
    visit_dtype(dst.dtype(), [&]<class To>() {
      kernels::for_each_run<2>(dst.shape(), {byte_strides(dst), byte_strides(src)},
                               {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                               [](std::array<char*, 2> p, const std::array<int64_t, 2>& st, int64_t n) {
                                 accumulate_run<From, To>(p[0], st[0], p[1], st[1], n);
                               });
    });
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(copy_kernel, cpu::copy);
MIXGRAD_CPU_KERNEL(fill, cpu::fill);
MIXGRAD_CPU_KERNEL(accumulate_kernel, cpu::accumulate);

}  // namespace mixgrad::backend
