#define BOOST_TEST_MODULE mixgrad soak
#include <boost/test/unit_test.hpp>
