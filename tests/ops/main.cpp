// The ops suite's main: Boost.Test's, plus `--op NAME` (or MIXGRAD_OP=NAME),
// which limits the op registry checks to the cases of one op of the table
// and, unless --run_test is given too, runs only those checks; and
// `--onednn always` (or MIXGRAD_TEST_ONEDNN=always), which runs oneDNN for
// every size it has a kernel for, where the registry's small cases would
// otherwise take the built-in kernels:
//
//   ./build/tests/test_ops --op conv2d
//   MIXGRAD_MAX_CPU_ISA=avx2 ./build/tests/test_ops --onednn always --run_test=op_registry
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "backend/onednn/onednn.hpp"
#include "op_registry.hpp"

namespace {

bool init_unit_test() {
  boost::unit_test::framework::master_test_suite().p_name.value = "mixgrad ops";
  return true;
}

}  // namespace

int main(int argc, char* argv[]) {
  std::vector<char*> args;
  std::string name;
  bool run_test_given = false;
  std::string onednn;
  if (const char* env = std::getenv("MIXGRAD_OP")) name = env;
  if (const char* env = std::getenv("MIXGRAD_TEST_ONEDNN")) onednn = env;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--op" && i + 1 < argc) {
      name = argv[++i];
    } else if (a == "--onednn" && i + 1 < argc) {
      onednn = argv[++i];
    } else if (a.rfind("--op=", 0) == 0) {
      name = a.substr(5);
    } else {
      if (a.rfind("--run_test", 0) == 0 || a == "-t") run_test_given = true;
      args.push_back(argv[i]);
    }
  }
  std::string run_registry = "--run_test=op_registry";
  if (!name.empty()) {
    const auto op = mixgrad::op_from_name(name);
    if (!op) {
      std::cerr << "test_ops: no op named '" << name << "' in the op table; ops:";
      for (size_t i = 0; i < mixgrad::kOpCount; ++i) std::cerr << ' ' << mixgrad::op_name(static_cast<mixgrad::OpKind>(i));
      std::cerr << '\n';
      return 2;
    }
    optest::op_filter() = *op;
    if (!run_test_given) args.push_back(run_registry.data());
  }
  if (onednn == "always") {
    mixgrad::backend::onednn::set_mode(mixgrad::backend::onednn::Mode::always);
  } else if (!onednn.empty() && onednn != "automatic") {
    std::cerr << "test_ops: --onednn takes always or automatic, not '" << onednn << "'\n";
    return 2;
  }
  args.push_back(nullptr);
  return boost::unit_test::unit_test_main(&init_unit_test, static_cast<int>(args.size()) - 1, args.data());
}
