// The deferred status checks (backend/pending_checks.hpp): a mutex-guarded
// list, run after a host synchronisation with the statuses' device, whose
// statuses are then read with one copy per device (not one each: a step with
// several class losses would otherwise wait on the stream once per loss).
#include "backend/pending_checks.hpp"

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/copy.hpp"
#include "backend/host_sync.hpp"

namespace mixgrad::backend {

namespace {

struct Pending {
  Tensor status;
  StatusCheck check;
};

std::mutex g_mutex;
std::vector<Pending> g_pending;  // guarded by g_mutex

bool eager_from_env() {
  const char* v = std::getenv("MIXGRAD_EAGER_CHECKS");
  return v != nullptr && v[0] == '1';
}
std::atomic<bool> g_eager{eager_from_env()};

// Reading a status copies it to the host, which runs the pending checks of
// its device again: the nested call must do nothing.
thread_local bool t_running = false;

// The checks deferred during captures on this thread (take_captured_checks).
thread_local std::vector<CapturedCheck> t_captured;

void run_one(const Pending& p) {
  const Tensor host = p.status.to(Device::cpu()).contiguous();
  p.check(host.data<int64_t>());
}

// Runs the checks of one device's statuses, read with one copy: the statuses
// are gathered into one int64 tensor on their device (device-side copies,
// queued on its stream), which comes to the host at once. Records the first
// error in `first`.
void run_device(const std::vector<const Pending*>& batch, std::exception_ptr& first) {
  try {
    int64_t total = 0;
    for (const Pending* p : batch) total += p->status.numel();
    const Tensor gathered = empty(Shape{total}, DType::int64, batch.front()->status.device());
    int64_t offset = 0;
    for (const Pending* p : batch) {
      const int64_t n = p->status.numel();
      copy(p->status.reshape(Shape{n}), gathered.narrow(0, offset, n));
      offset += n;
    }
    const Tensor host = gathered.to(Device::cpu());
    offset = 0;
    for (const Pending* p : batch) {
      try {
        p->check(host.data<int64_t>() + offset);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
      offset += p->status.numel();
    }
  } catch (...) {  // the gathering or the copy failed: the device's error
    if (!first) first = std::current_exception();
  }
}

// Runs the given checks, device by device; rethrows the first error after
// running them all.
void run_all(std::vector<Pending>& batch) {
  t_running = true;
  std::exception_ptr first;
  std::vector<bool> done(batch.size(), false);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (done[i]) continue;
    std::vector<const Pending*> same_device;
    for (size_t j = i; j < batch.size(); ++j)
      if (!done[j] && batch[j].status.device() == batch[i].status.device()) {
        same_device.push_back(&batch[j]);
        done[j] = true;
      }
    run_device(same_device, first);
  }
  t_running = false;
  if (first) std::rethrow_exception(first);
}

std::vector<Pending> take(int device, bool all) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<Pending> out, keep;
  for (Pending& p : g_pending) (all || p.status.device().index() == device ? out : keep).push_back(std::move(p));
  g_pending = std::move(keep);
  return out;
}

}  // namespace

Tensor status_tensor(Device device) {
  if (device.is_cpu()) {
    thread_local const Tensor cpu_status = empty(Shape{2}, DType::int64, Device::cpu());
    return cpu_status;
  }
  return empty(Shape{2}, DType::int64, device);
}

void defer_status_check(const Tensor& status, StatusCheck check) {
  if (capturing() != nullptr) {  // the graph writes it at each replay: rearm_captured_checks
    t_captured.push_back({status, std::move(check)});
    return;
  }
  if (status.device().is_cpu()) {
    check(Tensor(status).contiguous().data<int64_t>());
    return;
  }
  if (g_eager.load(std::memory_order_relaxed)) {
    run_one({status, std::move(check)});
    return;
  }
  bool full = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    full = static_cast<int>(g_pending.size()) >= kMaxPendingChecks;
  }
  if (full && !t_running) {
    std::vector<Pending> batch = take(0, true);
    run_all(batch);  // the errors so far come before this call's work is queued
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pending.push_back({status, std::move(check)});
}

std::vector<CapturedCheck> take_captured_checks() { return std::exchange(t_captured, {}); }

void rearm_captured_checks(const std::vector<CapturedCheck>& checks) {
  for (const CapturedCheck& c : checks) {
    const Tensor fresh = empty(c.status.shape(), DType::int64, c.status.device());
    copy(c.status, fresh);
    defer_status_check(fresh, c.check);
  }
}

void run_pending_checks(int device) {
  if (t_running) return;
  std::vector<Pending> batch = take(device, false);
  if (!batch.empty()) run_all(batch);
}

int pending_check_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int>(g_pending.size());
}

void set_eager_status_checks(bool on) { g_eager.store(on, std::memory_order_relaxed); }
bool eager_status_checks() { return g_eager.load(std::memory_order_relaxed); }

}  // namespace mixgrad::backend
