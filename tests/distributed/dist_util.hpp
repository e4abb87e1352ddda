// Helpers of the distributed suite: the world group and a rank-tagged check.
#pragma once

#include <boost/test/unit_test.hpp>

#include "mixgrad/distributed.hpp"
#include "mixgrad/mixgrad.hpp"

namespace dist_test {

inline const mixgrad::distributed::ProcessGroup& world() {
  static const mixgrad::distributed::ProcessGroup g = mixgrad::distributed::init_process_group();
  return g;
}

}  // namespace dist_test
