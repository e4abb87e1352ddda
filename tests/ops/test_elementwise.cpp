// Focused tests of the elementwise and reduction ops.
#include <boost/test/unit_test.hpp>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;

BOOST_AUTO_TEST_CASE(placeholder_add) {
  auto a = mg::tensor({1.f, 2.f}, {2});
  BOOST_TEST((a + a).to_vector<float>()[1] == 4.f);
}
