#define BOOST_TEST_MODULE mixgrad core
#include <boost/test/unit_test.hpp>
