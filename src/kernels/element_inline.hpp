// MIXGRAD_ELEMENT: how the code that runs once per element is declared (the
// functors of unary.hpp, binary.hpp and loss.hpp, kernels::math and
// fast_float.hpp). It must be inlined into the loops that call it, where it
// vectorises; a call per element keeps a loop scalar. GCC's inliner stops
// inlining once a file has grown by its unit-growth budget, and which
// functions miss out shifts with unrelated edits: adding one inlined call to
// backend/cpu/loss.cpp left BceWithLogitsLoss::grad_pred out of line and
// binary cross-entropy went from 3 to 19 ms. So the inlining is forced.
//
//   template <class C>
//   struct Square {
//     MIXGRAD_ELEMENT C operator()(C x) const { return x * x; }
//   };
#pragma once

#include "mixgrad/half.hpp"

#if defined(__CUDACC__)
#define MIXGRAD_ELEMENT __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define MIXGRAD_ELEMENT [[gnu::always_inline]] inline
#else
#define MIXGRAD_ELEMENT inline
#endif
