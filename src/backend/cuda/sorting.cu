// CUDA sorting (backend/sorting.hpp): cub::DeviceSegmentedRadixSort over
// the outer * inner lines. A first kernel turns each element into an
// unsigned key whose unsigned order is the CPU's order (floats: sign-flipped
// bits, -0 folded onto +0, every NaN the largest key; integers: sign bit
// flipped, uint8 as it is; descending: the key complemented, so the ascending sort is used
// either way) and lays the lines out contiguously with their positions as
// the values. Radix sort is stable, so equal values keep their input order,
// as on the CPU. A last kernel writes the first k of each line.
#include <cuda_runtime_api.h>

#include <climits>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <string>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/sorting.hpp"

namespace mixgrad::backend::cuda {

namespace {

template <class T> struct KeyOf;
template <> struct KeyOf<float> { using type = uint32_t; };
template <> struct KeyOf<double> { using type = uint64_t; };
template <> struct KeyOf<half> { using type = uint16_t; };
template <> struct KeyOf<bfloat16> { using type = uint16_t; };
template <> struct KeyOf<int32_t> { using type = uint32_t; };
template <> struct KeyOf<int64_t> { using type = uint64_t; };
template <> struct KeyOf<bool> { using type = uint8_t; };
template <> struct KeyOf<int8_t> { using type = uint8_t; };
template <> struct KeyOf<uint8_t> { using type = uint8_t; };

template <class T>
__device__ __forceinline__ typename KeyOf<T>::type order_key(T v) {
  using K = typename KeyOf<T>::type;
  constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
  if constexpr (std::is_same_v<T, bool>) {
    return v ? 1 : 0;
  } else if constexpr (std::is_unsigned_v<T>) {
    return static_cast<K>(v);  // uint8: already in order
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<K>(v) ^ sign;
  } else {
    K bits;
    memcpy(&bits, &v, sizeof(K));
    const K exp_mask = std::is_same_v<T, float>    ? K(0x7f800000u)
                       : std::is_same_v<T, double> ? K(0x7ff0000000000000ull)
                       : std::is_same_v<T, half>   ? K(0x7c00u)
                                                   : K(0x7f80u);
    const K abs = bits & ~sign;
    if ((abs & exp_mask) == exp_mask && (abs & ~exp_mask) != 0) return ~K(0);  // NaN: above +inf
    if (abs == 0) bits = 0;                                                  // -0 == +0
    return (bits & sign) ? K(~bits) : K(bits | sign);
  }
}

template <class T>
__global__ void make_keys_kernel(const T* x, Axis3 a, bool descending, typename KeyOf<T>::type* keys,
                                 int64_t* positions, int64_t n) {
  // p indexes the sorted layout [line, j]; line = o * inner + i.
  MIXGRAD_GRID_STRIDE_LOOP(p, n) {
    const int64_t j = p % a.axis, line = p / a.axis;
    const int64_t o = line / a.inner, i = line % a.inner;
    const auto k = order_key(x[(o * a.axis + j) * a.inner + i]);
    keys[p] = descending ? decltype(k)(~k) : k;
    positions[p] = j;
  }
}

__global__ void offsets_kernel(int* offsets, int64_t lines, int64_t n) {
  MIXGRAD_GRID_STRIDE_LOOP(l, lines + 1) offsets[l] = static_cast<int>(l * n);
}

template <class T>
__global__ void write_first_k_kernel(const T* x, Axis3 a, int64_t k, const int64_t* sorted_positions, T* values,
                                     int64_t* indices, int64_t total) {
  MIXGRAD_GRID_STRIDE_LOOP(q, total) {
    const int64_t j = q % k, line = q / k;
    const int64_t o = line / a.inner, i = line % a.inner;
    const int64_t pos = sorted_positions[line * a.axis + j];
    const int64_t dst = (o * k + j) * a.inner + i;
    values[dst] = x[(o * a.axis + pos) * a.inner + i];
    indices[dst] = pos;
  }
}

template <class T>
void sort_typed(const Tensor& x, Axis3 a, int64_t k, bool descending, const Tensor& values, const Tensor& indices,
                cudaStream_t stream) {
  using K = typename KeyOf<T>::type;
  const int64_t lines = a.outer * a.inner;
  const int64_t n = lines * a.axis;
  if (n > INT_MAX || lines > INT_MAX)
    throw ValueError("sort: " + std::to_string(n) + " elements in " + std::to_string(lines) +
                     " lines exceed the CUDA segmented sort's 32-bit counts");
  const Device dev = x.device();
  auto bytes_tensor = [&](size_t bytes) { return empty(Shape{static_cast<int64_t>((bytes + 7) / 8)}, DType::int64, dev); };
  const Tensor keys_in = bytes_tensor(sizeof(K) * n), keys_out = bytes_tensor(sizeof(K) * n);
  const Tensor pos_in = empty(Shape{n}, DType::int64, dev), pos_out = empty(Shape{n}, DType::int64, dev);
  const Tensor offsets = empty(Shape{lines + 1}, DType::int32, dev);
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  make_keys_kernel<T><<<lc.blocks, lc.threads, 0, stream>>>(device_ptr<const T>(x), a, descending,
                                                            static_cast<K*>(keys_in.raw_data()),
                                                            device_ptr<int64_t>(pos_in), n);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  const cuda_plan::LaunchConfig lo = cuda_plan::launch_config(lines + 1);
  offsets_kernel<<<lo.blocks, lo.threads, 0, stream>>>(device_ptr<int32_t>(offsets), lines, a.axis);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  const int* off = device_ptr<const int32_t>(offsets);
  size_t temp_bytes = 0;
  MIXGRAD_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const K*>(keys_in.raw_data()), static_cast<K*>(keys_out.raw_data()),
      device_ptr<const int64_t>(pos_in), device_ptr<int64_t>(pos_out), static_cast<int>(n), static_cast<int>(lines),
      off, off + 1, 0, static_cast<int>(sizeof(K) * 8), stream));
  const Tensor temp = bytes_tensor(std::max<size_t>(temp_bytes, 1));
  MIXGRAD_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(
      temp.raw_data(), temp_bytes, static_cast<const K*>(keys_in.raw_data()), static_cast<K*>(keys_out.raw_data()),
      device_ptr<const int64_t>(pos_in), device_ptr<int64_t>(pos_out), static_cast<int>(n), static_cast<int>(lines),
      off, off + 1, 0, static_cast<int>(sizeof(K) * 8), stream));
  const cuda_plan::LaunchConfig lk = cuda_plan::launch_config(lines * k);
  write_first_k_kernel<T><<<lk.blocks, lk.threads, 0, stream>>>(device_ptr<const T>(x), a, k,
                                                                device_ptr<const int64_t>(pos_out), device_ptr<T>(values),
                                                                device_ptr<int64_t>(indices), lines * k);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void sort_lines(const Tensor& x, Axis3 a, int64_t k, bool descending, const Tensor& values, const Tensor& indices) {
  if (a.outer * a.inner == 0 || k == 0 || a.axis == 0) return;
  const int device = values.device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  visit_dtype(x.dtype(), [&]<class T>() { sort_typed<T>(x, a, k, descending, values, indices, stream); });
}

MIXGRAD_CUDA_KERNEL(sort_lines, sort_lines);

}  // namespace mixgrad::backend::cuda
