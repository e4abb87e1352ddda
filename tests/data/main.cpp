#define BOOST_TEST_MODULE mixgrad data
#include <boost/test/unit_test.hpp>
