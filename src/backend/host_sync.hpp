// The host-synchronisation counter of the CUDA backend, and the guard that
// forbids host synchronisation while a CUDA graph is being captured. Every
// place where the backend makes the calling thread wait for a device (a
// stream or event synchronize, a device-to-host copy, cudaDeviceSynchronize,
// cudaFree's implicit device synchronisation) calls note_host_sync(op)
// before it calls CUDA: that counts one, or, on a thread that is capturing
// (a CaptureRegion is open), throws StateError naming `op` and counts
// nothing. A training step that keeps its state on the device should leave
// the count unchanged; tests record it around the work they check.
//
//   const int64_t before = backend::host_sync_count();
//   step();                                          // all on the device
//   assert(backend::host_sync_count() == before);    // no host wait
//
//   {
//     backend::CaptureRegion capturing("CapturedStep");
//     loss.item();   // StateError: "Tensor::item synchronises the host ... CapturedStep"
//   }
//
// The count is process-wide (all threads and devices); 0 forever in a build
// without CUDA. The capture flag is per thread, as cudaStreamCaptureModeThreadLocal
// is: other threads may synchronise while one captures.
#pragma once

#include <cstdint>
#include <string>

namespace mixgrad::backend {

/// Host synchronisations the CUDA backend has made since the process started.
int64_t host_sync_count();

/// Counts one host synchronisation made by `op`; called by the CUDA backend
/// before it waits. On a thread inside a CaptureRegion it throws StateError
/// naming `op` and the region instead, and the count does not move.
void note_host_sync(const char* op);

/// Throws StateError naming `op` and why when the calling thread is inside
/// a CaptureRegion: for work a CUDA graph cannot hold (a host value that a
/// replay would not read again, such as a random generator's counter, or a
/// copy from host memory). Does nothing otherwise.
void check_not_capturing(const char* op, const char* why);

/// The name of the calling thread's open CaptureRegion, or nullptr.
const char* capturing();

/// Marks the calling thread as capturing a CUDA graph for its scope. Regions
/// do not nest: opening one inside another is a StateError naming both.
class CaptureRegion {
 public:
  /// `owner` (a string literal or one that outlives the region) names the
  /// capture in the errors of the syncs it forbids.
  explicit CaptureRegion(const char* owner);
  ~CaptureRegion();
  CaptureRegion(const CaptureRegion&) = delete;
  CaptureRegion& operator=(const CaptureRegion&) = delete;

  /// The first op refused inside the region ("" when none), kept even when
  /// the caller caught the error: a capture that lost a sync is not valid.
  const std::string& refused() const { return refused_; }
  const char* owner() const { return owner_; }

 private:
  friend void note_host_sync(const char* op);
  friend void check_not_capturing(const char* op, const char* why);
  const char* owner_;
  std::string refused_;
};

}  // namespace mixgrad::backend
