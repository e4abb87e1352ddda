// One kernel source compiled once per instruction-set level, and the copy
// that simd::level() picks at run time. A kernel is a function object whose
// call operator takes the level's vector width in bytes (16 portable, 32
// AVX2, 64 AVX-512) and is always inlined, so it takes the instruction set
// of the copy it lands in:
//
//   struct Stats {
//     template <int Bytes>
//     [[gnu::always_inline]] RowStats operator()(const float* row, int64_t n) const;  // on GCC vector types
//   };
//   const auto stats = isa::variant<Stats, const float*, int64_t>();   // the level's copy
//   stats(Stats{}, row, n);
//
// Kernels whose loops the compiler vectorises by itself ignore Bytes;
// isa::RunJob is the one that calls job.run(args...).
//
// The choice is a function pointer taken once per call of the op, so it can
// be called inside an OpenMP region (which is outlined into a function of its
// own that would not inherit a target attribute).
#pragma once

#include <utility>

#include "core/simd.hpp"

namespace mixgrad::backend::cpu::isa {

/// What a kernel F called with arguments A... returns.
template <class F, class... A>
using Result = decltype(std::declval<const F&>().template operator()<16>(std::declval<A>()...));

/// A pointer to one level's copy of kernel F.
template <class F, class... A>
using Copy = Result<F, A...> (*)(const F&, A...);

// Each copy stays a function of its own (noinline): a kernel that calls
// another at its own width (on_width) then gives the callee all the vector
// registers, instead of sharing them with its own live values.
template <class F, class... A>
[[gnu::noinline]] Result<F, A...> on_portable(const F& f, A... args) {
  return f.template operator()<16>(std::forward<A>(args)...);
}

#if defined(__x86_64__) || defined(__i386__)
template <class F, class... A>
[[gnu::noinline]] __attribute__((target(MIXGRAD_AVX2_TARGET))) Result<F, A...> on_avx2(const F& f, A... args) {
  return f.template operator()<32>(std::forward<A>(args)...);
}
template <class F, class... A>
[[gnu::noinline]] __attribute__((target(MIXGRAD_AVX512_TARGET))) Result<F, A...> on_avx512(const F& f, A... args) {
  return f.template operator()<64>(std::forward<A>(args)...);
}
#endif

/// Kernel F's copy for vector width Bytes, called directly: for a kernel
/// that runs another at its own level (its Bytes).
template <int Bytes, class F, class... A>
[[gnu::always_inline]] inline Result<F, A...> on_width(const F& f, A... args) {
#if defined(__x86_64__) || defined(__i386__)
  if constexpr (Bytes == 64) return on_avx512<F, A...>(f, args...);
  if constexpr (Bytes == 32) return on_avx2<F, A...>(f, args...);
#endif
  return on_portable<F, A...>(f, args...);
}

/// The copy of kernel F for simd::level().
template <class F, class... A>
Copy<F, A...> variant() {
#if defined(__x86_64__) || defined(__i386__)
  switch (simd::level()) {
    case simd::Level::avx512: return &on_avx512<F, A...>;
    case simd::Level::avx2: return &on_avx2<F, A...>;
    case simd::Level::portable: break;
  }
#endif
  return &on_portable<F, A...>;
}

/// The kernel job.run(args...), for jobs whose loops the compiler vectorises
/// at each level (Job::run must be always inlined).
struct RunJob {
  template <int Bytes, class Job, class... A>
  [[gnu::always_inline]] auto operator()(const Job& job, A... args) const {
    return job.run(args...);
  }
};

}  // namespace mixgrad::backend::cpu::isa
