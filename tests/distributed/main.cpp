// The distributed suite runs on every rank of `mpirun -np N` (N = 2 in
// `meson test`), or alone as a group of one. The global fixture joins the
// group before any test case; every rank runs the same cases in the same
// order, so their collectives pair up.
#define BOOST_TEST_MODULE mixgrad distributed
#include <boost/test/unit_test.hpp>

#include "mixgrad/distributed/process_group.hpp"

struct JoinGroup {
  JoinGroup() { mixgrad::distributed::init_process_group(); }
};
BOOST_TEST_GLOBAL_FIXTURE(JoinGroup);
