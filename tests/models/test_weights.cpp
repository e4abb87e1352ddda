// models::load_weights and strip_num_batches_tracked on files written here
// as the convert script writes torchvision's (every BatchNorm2d with an int64
// scalar "num_batches_tracked"): a round trip, and each wrong file refused
// with a typed error naming the file and the key, the model left unchanged.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "../common/test_util.hpp"
#include "mixgrad/mixgrad.hpp"

namespace fs = std::filesystem;
namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace models = mixgrad::models;

namespace {

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("mixgrad_models_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
  fs::path file(const std::string& name) const { return dir / name; }
};

// The model's state dict as torch's would be: a counter after each
// BatchNorm2d's running_var.
mg::StateDict torch_style(const nn::Module& m) {
  mg::StateDict out;
  for (const auto& [name, t] : m.state_dict()) {
    out.insert(name, t);
    const std::string suffix = "running_var";
    if (name.size() > suffix.size() && name.ends_with(suffix))
      out.insert(name.substr(0, name.size() - suffix.size()) + "num_batches_tracked",
                 mg::tensor(std::vector<int64_t>{7}, mg::Shape{}));
  }
  return out;
}

// Every value of every state-dict entry, to see that a failed load changed nothing.
std::vector<std::vector<float>> contents(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(t.to(mg::DType::float32).to_vector<float>());
  return out;
}

models::ResNet seeded_resnet18(uint64_t seed, int64_t classes = 1000) {
  mg::manual_seed(seed);
  return models::resnet18({.num_classes = classes});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(weights)

BOOST_AUTO_TEST_CASE(a_torch_style_file_loads_every_tensor) {
  TempDir tmp;
  auto source = seeded_resnet18(1);
  const mg::StateDict sd = torch_style(source);
  BOOST_TEST(sd.size() == 122u);  // torchvision's resnet18 entry count
  mg::io::save_file(sd, tmp.file("r18.safetensors"));

  auto net = seeded_resnet18(2);
  BOOST_TEST_REQUIRE((contents(net) != contents(source)));
  models::load_weights(net, tmp.file("r18.safetensors"));
  BOOST_TEST((contents(net) == contents(source)));

  // A file without the counters (saved by mixgrad) loads too.
  mg::io::save_file(seeded_resnet18(3).state_dict(), tmp.file("plain.safetensors"));
  models::load_weights(net, tmp.file("plain.safetensors"));
  BOOST_TEST((contents(net) == contents(seeded_resnet18(3))));
}

BOOST_AUTO_TEST_CASE(only_batch_norm_counters_are_dropped) {
  auto net = seeded_resnet18(1);
  mg::StateDict sd = torch_style(net);
  const mg::StateDict stripped = models::strip_num_batches_tracked(sd, net);
  BOOST_TEST(stripped.size() == 102u);
  BOOST_TEST(!stripped.contains("layer2.0.downsample.1.num_batches_tracked"));
  BOOST_TEST(stripped.keys() == net.state_dict().keys(), boost::test_tools::per_element());

  // fc is a Linear and "layer9.0.bn1" names no module: both stay, and a
  // strict load reports them.
  const auto counter = mg::tensor(std::vector<int64_t>{1}, mg::Shape{});
  sd.insert("fc.num_batches_tracked", counter);
  sd.insert("layer9.0.bn1.num_batches_tracked", counter);
  const mg::StateDict kept = models::strip_num_batches_tracked(sd, net);
  BOOST_TEST(kept.contains("fc.num_batches_tracked"));
  BOOST_TEST(kept.contains("layer9.0.bn1.num_batches_tracked"));

  TempDir tmp;
  mg::io::save_file(sd, tmp.file("extra.safetensors"));
  auto target = seeded_resnet18(2);
  const auto before = contents(target);
  test_util::check_error<mg::ValueError>(
      [&] { models::load_weights(target, tmp.file("extra.safetensors")); },
      {"extra.safetensors", "unexpected keys", "'fc.num_batches_tracked'", "'layer9.0.bn1.num_batches_tracked'"});
  BOOST_TEST((contents(target) == before));
}

BOOST_AUTO_TEST_CASE(a_counter_that_is_not_an_integer_scalar_is_refused) {
  auto net = seeded_resnet18(1);
  mg::StateDict sd = net.state_dict();
  sd.insert("bn1.num_batches_tracked", mg::zeros({3}));
  test_util::check_error<mg::ValueError>([&] { models::strip_num_batches_tracked(sd, net); },
                                         {"'bn1.num_batches_tracked'", "float32", "3 elements"});
}

// resnet18's keys are a subset of resnet50's, under other shapes: the
// keys are checked first, so the error lists them rather than a shape.
BOOST_AUTO_TEST_CASE(another_architecture_is_refused_naming_the_file_and_keys) {
  TempDir tmp;
  auto r50 = models::resnet50();
  mg::io::save_file(torch_style(r50), tmp.file("resnet50.safetensors"));
  mg::io::save_file(torch_style(seeded_resnet18(1)), tmp.file("resnet18.safetensors"));
  auto net = seeded_resnet18(2);
  const auto before = contents(net);
  test_util::check_error<mg::ValueError>(
      [&] { models::load_weights(net, tmp.file("resnet50.safetensors")); },
      {"models::load_weights", "resnet50.safetensors", "unexpected keys: 'layer1.0.conv3.weight'",
       "'layer1.0.bn3.num_batches_tracked'", "nothing was loaded"});
  BOOST_TEST((contents(net) == before));

  const auto before50 = contents(r50);
  test_util::check_error<mg::ValueError>(
      [&] { models::load_weights(r50, tmp.file("resnet18.safetensors")); },
      {"resnet18.safetensors", "missing keys: ", "'layer1.0.conv3.weight'", "nothing was loaded"});
  BOOST_TEST((contents(r50) == before50));
}

BOOST_AUTO_TEST_CASE(another_shape_is_refused_naming_the_key_and_both_shapes) {
  TempDir tmp;
  mg::io::save_file(torch_style(seeded_resnet18(1, 10)), tmp.file("ten_classes.safetensors"));
  auto net = seeded_resnet18(2);
  const auto before = contents(net);
  test_util::check_error<mg::ShapeError>([&] { models::load_weights(net, tmp.file("ten_classes.safetensors")); },
                                         {"ten_classes.safetensors", "'fc.weight'", "float32[10, 512]",
                                          "float32[1000, 512]"});
  BOOST_TEST((contents(net) == before));
}

BOOST_AUTO_TEST_CASE(another_dtype_is_refused) {
  TempDir tmp;
  auto half = seeded_resnet18(1);
  half.to(mg::DType::float16);
  mg::io::save_file(torch_style(half), tmp.file("half.safetensors"));
  auto net = seeded_resnet18(2);
  const auto before = contents(net);
  test_util::check_error<mg::DTypeError>([&] { models::load_weights(net, tmp.file("half.safetensors")); },
                                         {"half.safetensors", "'conv1.weight'", "float16"});
  BOOST_TEST((contents(net) == before));
}

BOOST_AUTO_TEST_CASE(a_missing_or_truncated_file_is_an_io_error) {
  TempDir tmp;
  auto net = seeded_resnet18(2);
  const auto before = contents(net);
  test_util::check_error<mg::IOError>([&] { models::load_weights(net, tmp.file("absent.safetensors")); },
                                      {"absent.safetensors"});
  mg::io::save_file(torch_style(seeded_resnet18(1)), tmp.file("cut.safetensors"));
  fs::resize_file(tmp.file("cut.safetensors"), fs::file_size(tmp.file("cut.safetensors")) / 2);
  test_util::check_error<mg::IOError>([&] { models::load_weights(net, tmp.file("cut.safetensors")); },
                                      {"cut.safetensors"});
  BOOST_TEST((contents(net) == before));
}

BOOST_AUTO_TEST_SUITE_END()
