// The host-synchronisation counter of the CUDA backend: every place where
// the backend makes the calling thread wait for a device (a stream or event
// synchronize, a device-to-host copy, cudaDeviceSynchronize, cudaFree's
// implicit device synchronisation) counts one. A training step that keeps
// its state on the device should leave the count unchanged; tests record it
// around the work they check.
//
//   const int64_t before = backend::host_sync_count();
//   step();                                          // all on the device
//   assert(backend::host_sync_count() == before);    // no host wait
//
// Process-wide (all threads and devices); 0 forever in a build without CUDA.
#pragma once

#include <cstdint>

namespace mixgrad::backend {

/// Host synchronisations the CUDA backend has made since the process started.
int64_t host_sync_count();

/// Counts one host synchronisation; called by the CUDA backend where it waits.
void note_host_sync();

}  // namespace mixgrad::backend
