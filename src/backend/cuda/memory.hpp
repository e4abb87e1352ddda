// The CUDA caching allocator's capture pools (backend/capture_pool.hpp), for
// the graph capture of a training step (backend/cuda/graph.cpp). The
// allocator itself is reached through Storage (mixgrad/allocator.hpp).
#pragma once

#include "backend/capture_pool.hpp"

namespace mixgrad::backend::cuda {

/// The capture pools of the CUDA allocator (one for all devices).
CapturePools& capture_pools();

}  // namespace mixgrad::backend::cuda
