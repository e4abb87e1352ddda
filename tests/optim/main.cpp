#define BOOST_TEST_MODULE mixgrad optim
#include <boost/test/unit_test.hpp>
