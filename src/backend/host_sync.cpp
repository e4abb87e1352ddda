// The host-synchronisation counter (backend/host_sync.hpp).
#include "backend/host_sync.hpp"

#include <atomic>

namespace mixgrad::backend {

namespace {
std::atomic<int64_t> syncs{0};
}  // namespace

int64_t host_sync_count() { return syncs.load(std::memory_order_relaxed); }

void note_host_sync() { syncs.fetch_add(1, std::memory_order_relaxed); }

}  // namespace mixgrad::backend
