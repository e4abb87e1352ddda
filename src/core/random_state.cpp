// The global generator's state, behind one mutex: random ops reserve
// counter blocks from several threads.
#include "core/random_state.hpp"

#include <mutex>

namespace mixgrad {

namespace random_state {
namespace {
std::mutex g_mutex;
uint64_t g_seed = 0x5eed;
uint64_t g_counter = 0;
}  // namespace
uint64_t seed() {
  std::lock_guard lock(g_mutex);
  return g_seed;
}
uint64_t reserve(uint64_t n) {
  std::lock_guard lock(g_mutex);
  const uint64_t first = g_counter;
  g_counter += n;
  return first;
}
State get() {
  std::lock_guard lock(g_mutex);
  return {g_seed, g_counter};
}
void set(const State& state) {
  std::lock_guard lock(g_mutex);
  g_seed = state.seed;
  g_counter = state.counter;
}
}  // namespace random_state


}  // namespace mixgrad
