// The same logits as torchvision on the same weights and input, float32,
// eval mode, for vgg16, vgg16_bn, resnet18 and resnet50.
//
// main() runs scripts/torchvision_reference.py (with $MIXGRAD_PYTHON, from
// $MIXGRAD_SOURCE_ROOT) into a temporary directory: torchvision's models on
// its own random initialisation (seed 0, batch-norm statistics from two
// training passes), each state dict through scripts/convert_torch_checkpoint.py,
// a [2, 3, 224, 224] input and torchvision's logits (about 1.3 GB, removed at
// the end). Each case loads one
// architecture with models::load_weights and compares. Where torch or
// torchvision cannot be imported the script exits 77, and so does this
// program (meson counts it skipped), after saying so.
//
// Tolerance: max |mixgrad - torchvision| <= 1e-4 * max(1, max |logit|): 1e-4
// absolute for logits up to 1 in size, 1e-4 relative to the largest logit
// above that (float32 sums of thousands of products, in a different order
// from torch's, differ in their last bits).
#define BOOST_TEST_MODULE mixgrad torchvision logits
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "mixgrad/mixgrad.hpp"

namespace fs = std::filesystem;
namespace mg = mixgrad;
namespace models = mixgrad::models;

namespace {

constexpr int kSkipExitCode = 77;
fs::path g_dir;  // the reference files

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Runs the reference script; its exit status.
int run_reference(const fs::path& dir) {
  const fs::path root = env_or("MIXGRAD_SOURCE_ROOT", ".");
  const std::string cmd = quoted(env_or("MIXGRAD_PYTHON", "python3")) + " " +
                          quoted((root / "scripts" / "torchvision_reference.py").string()) + " " +
                          quoted(dir.string());
  std::cout << "running: " << cmd << std::endl;
  const int rc = std::system(cmd.c_str());
  return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

void check_logits(const std::string& arch, mg::nn::Module& model) {
  models::load_weights(model, g_dir / (arch + ".safetensors"));
  model.eval();
  const mg::StateDict io = mg::io::load_file(g_dir / (arch + ".io.safetensors"));
  mg::Tensor got;
  {
    mg::autodiff::no_grad guard;
    got = model(io.at("input"));
  }
  const mg::Tensor& want = io.at("logits");
  BOOST_TEST_REQUIRE(mg::to_string(got.shape()) == mg::to_string(want.shape()));
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double scale = 0, diff = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    scale = std::max(scale, std::abs(double(w[i])));
    diff = std::max(diff, std::abs(double(g[i]) - double(w[i])));
  }
  const double tol = 1e-4 * std::max(1.0, scale);
  std::cout << arch << ": max |logit| " << scale << ", max |mixgrad - torchvision| " << diff << " (tolerance "
            << tol << ")" << std::endl;
  BOOST_TEST(diff <= tol, arch << ": max difference " << diff << " > " << tol);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(torchvision_logits)

BOOST_AUTO_TEST_CASE(resnet18) {
  auto net = models::resnet18();
  check_logits("resnet18", net);
}

BOOST_AUTO_TEST_CASE(resnet50) {
  auto net = models::resnet50();
  check_logits("resnet50", net);
}

BOOST_AUTO_TEST_CASE(vgg16) {
  auto net = models::vgg16();
  check_logits("vgg16", net);
}

BOOST_AUTO_TEST_CASE(vgg16_bn) {
  auto net = models::vgg16_bn();
  check_logits("vgg16_bn", net);
}

BOOST_AUTO_TEST_SUITE_END()

int main(int argc, char* argv[]) {
  g_dir = fs::temp_directory_path() / ("mixgrad_torchvision_" + std::to_string(::getpid()));
  fs::remove_all(g_dir);
  fs::create_directories(g_dir);
  const int rc = run_reference(g_dir);
  int result = rc;
  if (rc == kSkipExitCode) {
    std::cout << "skipped: torch, torchvision or safetensors is not importable (see docs/training.md, \"torchvision "
                 "models and weights\")"
              << std::endl;
  } else if (rc != 0) {
    std::cerr << "the reference script failed with exit status " << rc << std::endl;
  } else {
    result = boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
  }
  fs::remove_all(g_dir);
  return result;
}
