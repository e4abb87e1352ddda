#define BOOST_TEST_MODULE mixgrad amp
#include <boost/test/unit_test.hpp>
