#define BOOST_TEST_MODULE mixgrad nn
#include <boost/test/unit_test.hpp>
