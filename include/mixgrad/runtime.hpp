// mixgrad/runtime.hpp — process-wide runtime settings of the CPU backend.
//
//   mg::set_num_threads(4);        // CPU loops and oneDNN use 4 threads
//   int n = mg::num_threads();
//
// Device settings (streams, device count, synchronisation) are in
// mixgrad/cuda.hpp.
#pragma once

namespace mixgrad {

/// Threads used by mixgrad's CPU loops and oneDNN (OpenMP's thread count of
/// the calling thread and the threads it starts later). ValueError for n < 1;
/// the setting is unchanged then.
void set_num_threads(int n);

/// The thread count set_num_threads() set, or OpenMP's default.
int num_threads();

}  // namespace mixgrad
