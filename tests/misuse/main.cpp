#define BOOST_TEST_MODULE mixgrad misuse
#include <boost/test/unit_test.hpp>
