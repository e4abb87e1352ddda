#define BOOST_TEST_MODULE mixgrad train
#include <boost/test/unit_test.hpp>
