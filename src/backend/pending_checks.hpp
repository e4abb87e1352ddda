// Deferred checks of status tensors written by device kernels. A kernel that
// validates its input as it reads it (the class losses' label check) writes
// a small int64 status on its device; reading it right away would stall the
// stream once per call. Instead the op hands the status and a check to this
// list, and the checks run at the device's next synchronisation with the
// host (a copy to the host: item(), to_vector(), to(cpu); cuda::synchronize),
// where the status is ready and reading it costs no extra wait. A check that
// fails throws its error from there. CPU statuses are checked at once.
//
//   const Tensor status = backend::status_tensor(device);
//   backend::cross_entropy_forward(args, out, stats, status);
//   backend::check_status(status, [=](const int64_t* st) { if (st[0] >= 0) throw ValueError(...); });
//
// Inside a CUDA graph capture (backend/host_sync.hpp's CaptureRegion) a
// check is not kept here but by the capture (take_captured_checks): the
// graph's kernels write the status again at every replay, and the captured
// step re-arms the check after each launch (rearm_captured_checks), on a
// copy of the status made then, so each replay is checked as an eager step
// would be.
//
// set_eager_status_checks(true) (or MIXGRAD_EAGER_CHECKS=1 in the
// environment) checks every status right after its kernel instead: slower,
// but the error names the op that failed at the call that failed. The list
// holds at most kMaxPendingChecks entries; the next one runs them first, so
// a loop that never reads a value from the device still sees its errors.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::backend {

/// Throws when the status (copied to the host) reports a failure.
using StatusCheck = std::function<void(const int64_t* status)>;

/// Pending checks kept per process before they are run on the next defer.
inline constexpr int kMaxPendingChecks = 256;

/// Runs `check` on the contents of `status` (a contiguous int64 tensor): at
/// once for a CPU status or with eager checks on, else at the next
/// synchronisation of its device. On a thread that is capturing a graph:
/// kept for the capture instead (any device, eager or not).
void defer_status_check(const Tensor& status, StatusCheck check);

/// A status check made during a capture, as the capture keeps it.
struct CapturedCheck {
  Tensor status;
  StatusCheck check;
};

/// The checks deferred on the calling thread during captures since the last
/// call, in order; the list is emptied.
std::vector<CapturedCheck> take_captured_checks();

/// After a replay of the graph that holds `checks`: each status copied (on
/// its device, queued after the replay) into a fresh status, whose check is
/// deferred as defer_status_check does.
void rearm_captured_checks(const std::vector<CapturedCheck>& checks);

/// A status for a kernel to write (int64 [2]: where the first failure is, or
/// -1, and what failed) on `device`: on the CPU one per thread, reused, as
/// check_status reads it before the next kernel can write it.
Tensor status_tensor(Device device);

/// Runs `check` on the contents of `status` once its kernel has written it:
/// at once on the CPU, where it is host memory (nothing copied, `check` not
/// kept), else as defer_status_check. `check` keeps what its error needs by
/// value (core::Description).
template <class Check>
void check_status(const Tensor& status, Check&& check) {
  if (status.device().is_cpu()) {
    check(status.data<int64_t>());
    return;
  }
  defer_status_check(status, StatusCheck(std::forward<Check>(check)));
}

/// Runs (and forgets) the pending checks of `device` (a CUDA device index);
/// throws the error of the first that fails after running them all. Called
/// after the host synchronised with that device. Does nothing when called
/// from within a check run.
void run_pending_checks(int device);

/// Number of checks waiting (all devices).
int pending_check_count();

/// Turns eager checking on or off (default: MIXGRAD_EAGER_CHECKS set to 1).
void set_eager_status_checks(bool on);
bool eager_status_checks();

}  // namespace mixgrad::backend
