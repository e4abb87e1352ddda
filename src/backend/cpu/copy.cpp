#include "backend/copy.hpp"

#include <cstring>

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

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  visit_dtype(src.dtype(), [&]<class From>() {
    visit_dtype(dst.dtype(), [&]<class To>() {
      kernels::for_each_run<2>(dst.shape(), {byte_strides(dst), byte_strides(src)},
                               {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                               [](std::array<char*, 2> p, const std::array<int64_t, 2>& st, int64_t n) {
                                 convert_run<From, To>(p[1], st[1], p[0], st[0], n);
                               });
    });
  });
}

void fill(const Tensor& dst, double value) {
  visit_dtype(dst.dtype(), [&]<class T>() {
    const T v = kernels::cast<T>(value);
    kernels::for_each_run<1>(dst.shape(), {byte_strides(dst)}, {static_cast<char*>(dst.raw_data())},
                             [v](std::array<char*, 1> p, const std::array<int64_t, 1>& st, int64_t n) {
                               if (st[0] == sizeof(T)) {
                                 T* d = reinterpret_cast<T*>(p[0]);
                                 for (int64_t i = 0; i < n; ++i) d[i] = v;
                               } else {
                                 for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * st[0]) = v;
                               }
                             });
  });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  visit_dtype(src.dtype(), [&]<class From>() {
    visit_dtype(dst.dtype(), [&]<class To>() {
      using Acc = kernels::compute_t<To>;
      kernels::for_each_run<2>(dst.shape(), {byte_strides(dst), byte_strides(src)},
                               {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())},
                               [](std::array<char*, 2> p, const std::array<int64_t, 2>& st, int64_t n) {
                                 for (int64_t i = 0; i < n; ++i) {
                                   To& d = *reinterpret_cast<To*>(p[0] + i * st[0]);
                                   const From s = *reinterpret_cast<const From*>(p[1] + i * st[1]);
                                   d = kernels::cast<To>(kernels::cast<Acc>(d) + kernels::cast<Acc>(s));
                                 }
                               });
    });
  });
}

}  // namespace mixgrad::backend::cpu
