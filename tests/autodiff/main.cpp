#define BOOST_TEST_MODULE mixgrad autodiff
#include <boost/test/unit_test.hpp>
