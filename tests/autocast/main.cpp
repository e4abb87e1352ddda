#define BOOST_TEST_MODULE mixgrad autocast
#include <boost/test/unit_test.hpp>
