// A job in which one rank fails, for the tests that prove the job ends
// (run under mpirun; expected to exit non-zero, quickly, with a message
// naming the failing rank):
//   failing_rank throw   the last rank passes a non-contiguous tensor to
//                        all_reduce; the ValueError escapes main
//   failing_rank hang    the last rank never joins the all-reduce; the others
//                        give up after MIXGRAD_DIST_TIMEOUT seconds
// The other ranks wait in the all-reduce the failing rank never joins.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "mixgrad/distributed.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace dist = mixgrad::distributed;

int main(int argc, char** argv) {
  const bool hang = argc > 1 && std::strcmp(argv[1], "hang") == 0;
  auto group = dist::init_process_group();
  mg::Tensor t = mg::ones({4, 4});
  if (group.rank() == group.world_size() - 1) {
    if (hang) {
      std::this_thread::sleep_for(std::chrono::seconds(600));
      return 0;
    }
    dist::all_reduce(group, t.narrow(1, 0, 2), dist::ReduceOp::sum);  // throws ValueError
  } else {
    dist::all_reduce(group, t, dist::ReduceOp::sum);
  }
  std::printf("rank %d: not reached in a job of several ranks\n", group.rank());
  return group.world_size() > 1 ? 3 : 0;
}
