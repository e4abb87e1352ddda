#define BOOST_TEST_MODULE mixgrad models
#include <boost/test/unit_test.hpp>
