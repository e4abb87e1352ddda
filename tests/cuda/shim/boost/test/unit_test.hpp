// A stand-in for the few Boost.Test macros the CUDA device suite uses, so
// that test_cuda_device builds on a GPU machine without Boost
// (tests/cuda/meson.build puts this folder first on the include path only in
// builds with -Dtests=false; every other build uses Boost.Test itself).
//
// Covered: BOOST_AUTO_TEST_CASE, BOOST_AUTO_TEST_SUITE(_END) (no nesting of
// names), BOOST_TEST / BOOST_TEST_REQUIRE / BOOST_REQUIRE with an optional
// streamed message or per_element(), BOOST_TEST_CONTEXT, BOOST_CHECK_THROW,
// BOOST_CHECK_NO_THROW, BOOST_ERROR, unit_test_main. A failed check prints
// file, line, the expression and the open contexts; a failed REQUIRE or an
// escaping exception ends its test case; the exit status is 0 when nothing
// failed, 201 otherwise (as Boost.Test). `--run_test=NAME` runs the cases
// whose name contains NAME; other arguments are ignored.
#pragma once

#include <cstdio>
#include <cstring>
#include <exception>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace boost::test_tools {
/// Boost compares containers element by element with it; here == does.
struct per_element {};
inline std::ostream& operator<<(std::ostream& os, per_element) { return os; }
}  // namespace boost::test_tools

namespace mixgrad_test_shim {

struct Case {
  const char* name;
  void (*fn)();
};
inline std::vector<Case>& cases() {
  static std::vector<Case> c;
  return c;
}
struct Register {
  Register(const char* name, void (*fn)()) { cases().push_back({name, fn}); }
};
inline int& failures() {
  static int f = 0;
  return f;
}
inline std::vector<std::string>& contexts() {
  static std::vector<std::string> c;
  return c;
}
struct RequireFailed {};

inline void fail(const char* file, int line, const std::string& what, bool require) {
  ++failures();
  std::fprintf(stderr, "%s:%d: error: %s\n", file, line, what.c_str());
  for (const auto& c : contexts()) std::fprintf(stderr, "    context: %s\n", c.c_str());
  if (require) throw RequireFailed{};
}

struct ContextGuard {
  explicit ContextGuard(std::string s) { contexts().push_back(std::move(s)); }
  ~ContextGuard() { contexts().pop_back(); }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;
};

inline int run_all(int argc, char** argv) {
  const char* filter = nullptr;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--run_test=", 11) == 0) filter = argv[i] + 11;
  int ran = 0, failed_cases = 0;
  for (const Case& c : cases()) {
    if (filter && !std::strstr(c.name, filter)) continue;
    ++ran;
    const int before = failures();
    try {
      c.fn();
    } catch (const RequireFailed&) {
    } catch (const std::exception& e) {
      fail(c.name, 0, std::string("uncaught exception: ") + e.what(), false);
    } catch (...) {
      fail(c.name, 0, "uncaught exception of unknown type", false);
    }
    contexts().clear();
    if (failures() != before) {
      ++failed_cases;
      std::fprintf(stderr, "test case %s: FAILED\n", c.name);
    }
  }
  std::printf("%d test cases run, %d failed, %d failed checks\n", ran, failed_cases, failures());
  return failures() == 0 ? 0 : 201;
}

}  // namespace mixgrad_test_shim

namespace boost::unit_test {
inline int unit_test_main(bool (*init)(), int argc, char** argv) {
  if (init && !init()) return 200;
  return ::mixgrad_test_shim::run_all(argc, argv);
}
}  // namespace boost::unit_test

#ifdef BOOST_TEST_MODULE
bool init_unit_test() { return true; }
#endif

#define BOOST_AUTO_TEST_SUITE(name)
#define BOOST_AUTO_TEST_SUITE_END()
#define BOOST_AUTO_TEST_CASE(name)                                                        \
  static void name();                                                                     \
  static const ::mixgrad_test_shim::Register name##_registered_(#name, &name);           \
  static void name()

#define MIXGRAD_SHIM_CHECK(require, expr, ...)                                           \
  do {                                                                                    \
    if (!static_cast<bool>(expr)) {                                                       \
      std::ostringstream mixgrad_shim_m_;                                                 \
      mixgrad_shim_m_ << "check " #expr " failed" __VA_OPT__(<< ": " << __VA_ARGS__);    \
      ::mixgrad_test_shim::fail(__FILE__, __LINE__, mixgrad_shim_m_.str(), require);     \
    }                                                                                     \
  } while (0)
#define BOOST_TEST(expr, ...) MIXGRAD_SHIM_CHECK(false, expr __VA_OPT__(, ) __VA_ARGS__)
#define BOOST_TEST_REQUIRE(expr, ...) MIXGRAD_SHIM_CHECK(true, expr __VA_OPT__(, ) __VA_ARGS__)
#define BOOST_REQUIRE(expr) MIXGRAD_SHIM_CHECK(true, expr)
#define BOOST_ERROR(...)                                                                  \
  do {                                                                                    \
    std::ostringstream mixgrad_shim_m_;                                                   \
    mixgrad_shim_m_ << __VA_ARGS__;                                                       \
    ::mixgrad_test_shim::fail(__FILE__, __LINE__, mixgrad_shim_m_.str(), false);         \
  } while (0)
#define BOOST_TEST_CONTEXT(...)                                                           \
  if (::mixgrad_test_shim::ContextGuard mixgrad_shim_ctx_{[&] {                           \
        std::ostringstream s_;                                                            \
        s_ << __VA_ARGS__;                                                                \
        return s_.str();                                                                  \
      }()};                                                                               \
      true)
#define BOOST_CHECK_THROW(stmt, Ex)                                                       \
  do {                                                                                    \
    bool mixgrad_shim_thrown_ = false;                                                    \
    try {                                                                                 \
      stmt;                                                                               \
    } catch (const Ex&) {                                                                 \
      mixgrad_shim_thrown_ = true;                                                        \
    } catch (...) {                                                                       \
    }                                                                                     \
    if (!mixgrad_shim_thrown_)                                                            \
      ::mixgrad_test_shim::fail(__FILE__, __LINE__, "no " #Ex " from " #stmt, false);    \
  } while (0)
#define BOOST_CHECK_NO_THROW(stmt)                                                        \
  do {                                                                                    \
    try {                                                                                 \
      stmt;                                                                               \
    } catch (const std::exception& e) {                                                   \
      ::mixgrad_test_shim::fail(__FILE__, __LINE__, std::string(#stmt " threw: ") + e.what(), false); \
    }                                                                                     \
  } while (0)
