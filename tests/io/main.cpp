#define BOOST_TEST_MODULE mixgrad io
#include <boost/test/unit_test.hpp>
