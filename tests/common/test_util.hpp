// Small helpers shared by the Boost.Test suites: reading a tensor's values
// and checking what an exception says.
//
//   #include "../common/test_util.hpp"
//   using test_util::values;
//   BOOST_TEST(values(t) == std::vector<double>({1, 2}), tt::per_element());
//   test_util::check_error<mg::ShapeError>([&] { F::reshape(x, {7}); }, {"reshape", "float32[2, 3]"});
#pragma once

#include <boost/test/unit_test.hpp>

#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace test_util {

/// Every element of `t`, converted to double, in row-major order.
inline std::vector<double> values(const mixgrad::Tensor& t) { return t.to_vector<double>(); }

/// True when the error's message contains every one of `parts`.
inline bool message_has(const mixgrad::Error& e, std::initializer_list<const char*> parts) {
  const std::string what = e.what();
  for (const char* p : parts)
    if (what.find(p) == std::string::npos) return false;
  return true;
}

/// Runs f, which must throw exactly E (or a subclass) with every needle in
/// its message; reports a test error otherwise.
template <class E, class F>
void check_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    BOOST_ERROR("no exception; expected one mentioning " + needles.front());
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) BOOST_TEST(msg.find(n) != std::string::npos, "'" << n << "' in: " << msg);
  } catch (const std::exception& e) {
    BOOST_ERROR(std::string("wrong exception type: ") + e.what());
  }
}

}  // namespace test_util
