// torchvision's architectures without torch: the state-dict names and shapes
// against torchvision's (resnet18 key by key, the others by counts and
// sample keys), the forward shapes, torchvision's initialisation, and the
// head swap and freezing of the fine-tuning guides.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "mixgrad/mixgrad.hpp"
#include "resnet18_state_dict.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace models = mixgrad::models;

namespace {

std::string dims(const mg::Shape& s) {
  std::string out;
  for (int i = 0; i < s.ndim(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(s[i]);
  }
  return out;
}

// "name d0,d1" per entry of the module's state dict, in its order.
std::vector<std::string> state_lines(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name + " " + dims(t.shape()));
  for (const auto& [name, t] : m.named_buffers()) out.push_back(name + " " + dims(t.shape()));
  return out;
}

int64_t count_parameters(const nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

mg::Shape shape_of(const nn::Module& m, const std::string& key) {
  for (const auto& [name, t] : m.named_parameters())
    if (name == key) return t.shape();
  for (const auto& [name, t] : m.named_buffers())
    if (name == key) return t.shape();
  BOOST_ERROR("no key " << key);
  return {};
}

// Mean and standard deviation of a tensor's elements.
std::pair<double, double> moments(const mg::Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (const float x : v) ss += (x - mean) * (x - mean);
  return {mean, std::sqrt(ss / static_cast<double>(v.size()))};
}

bool all_equal(const mg::Tensor& t, float value) {
  for (const float x : t.to_vector<float>())
    if (x != value) return false;
  return true;
}

mg::Tensor image(int64_t n, int64_t size) { return test_util::randn({n, 3, size, size}, 7); }

}  // namespace

BOOST_AUTO_TEST_SUITE(architectures)

BOOST_AUTO_TEST_CASE(resnet18_state_dict_is_torchvisions_key_for_key) {
  std::vector<std::string> want;
  std::istringstream lines(models_test::kResNet18StateDict);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) want.push_back(line);
  BOOST_TEST_REQUIRE(want.size() == 102u);

  auto net = models::resnet18();
  // state_dict() puts each module's parameters before its buffers, level by
  // level; named_parameters + named_buffers give the same set, so compare
  // state_dict()'s own order.
  std::vector<std::string> got;
  for (const auto& [name, t] : net.state_dict()) got.push_back(name + " " + dims(t.shape()));
  BOOST_TEST(got == want, boost::test_tools::per_element());
  BOOST_TEST(count_parameters(net) == 11'689'512);
}

BOOST_AUTO_TEST_CASE(resnet50_counts_and_keys_are_torchvisions) {
  auto net = models::resnet50();
  BOOST_TEST(count_parameters(net) == 25'557'032);
  BOOST_TEST(net.parameters().size() == 161u);
  BOOST_TEST(state_lines(net).size() == 320u - 53u);  // torchvision's entries less its 53 batch counters
  BOOST_TEST(dims(shape_of(net, "layer1.0.conv3.weight")) == "256,64,1,1");
  BOOST_TEST(dims(shape_of(net, "layer1.0.downsample.0.weight")) == "256,64,1,1");
  BOOST_TEST(dims(shape_of(net, "layer1.0.downsample.1.running_var")) == "256");
  BOOST_TEST(dims(shape_of(net, "layer4.2.bn3.weight")) == "2048");
  BOOST_TEST(dims(shape_of(net, "fc.weight")) == "1000,2048");
  // v1.5: the stride is on the 3x3 conv of the first block, and on its shortcut.
  BOOST_TEST(net["layer2"][0]["conv1"].as<nn::Conv2d>()->options().stride.h == 1);
  BOOST_TEST(net["layer2"][0]["conv2"].as<nn::Conv2d>()->options().stride.h == 2);
  BOOST_TEST(net["layer2"][0]["downsample"][0].as<nn::Conv2d>()->options().stride.h == 2);
}

BOOST_AUTO_TEST_CASE(vgg16_and_vgg16_bn_counts_and_keys_are_torchvisions) {
  auto vgg = models::vgg16();
  BOOST_TEST(count_parameters(vgg) == 138'357'544);
  BOOST_TEST(state_lines(vgg).size() == 32u);
  BOOST_TEST(dims(shape_of(vgg, "features.0.weight")) == "64,3,3,3");
  BOOST_TEST(dims(shape_of(vgg, "features.28.weight")) == "512,512,3,3");
  BOOST_TEST(dims(shape_of(vgg, "classifier.0.weight")) == "4096,25088");
  BOOST_TEST(dims(shape_of(vgg, "classifier.3.weight")) == "4096,4096");
  BOOST_TEST(dims(shape_of(vgg, "classifier.6.weight")) == "1000,4096");
  BOOST_TEST(vgg.features().size() == 31u);

  auto bn = models::vgg16_bn();
  BOOST_TEST(count_parameters(bn) == 138'365'992);
  BOOST_TEST(state_lines(bn).size() == 97u - 13u);
  BOOST_TEST(dims(shape_of(bn, "features.1.running_mean")) == "64");
  BOOST_TEST(dims(shape_of(bn, "features.40.weight")) == "512,512,3,3");
  BOOST_TEST(dims(shape_of(bn, "features.41.running_var")) == "512");
  BOOST_TEST(bn.features().size() == 44u);
}

BOOST_AUTO_TEST_CASE(forward_shapes) {
  auto r18 = models::resnet18({.num_classes = 10});
  r18.eval();
  BOOST_TEST(mg::to_string(r18(image(2, 64)).shape()) == "[2, 10]");
  auto r50 = models::resnet50();
  r50.eval();
  BOOST_TEST(mg::to_string(r50(image(1, 64)).shape()) == "[1, 1000]");
  // 32x32 leaves VGG's features 1x1; the adaptive pool spreads it to 7x7.
  auto vgg = models::vgg16_bn({.num_classes = 5});
  vgg.eval();
  BOOST_TEST(mg::to_string(vgg(image(1, 32)).shape()) == "[1, 5]");
  test_util::check_error<mg::ShapeError>([&] { r18(test_util::randn({1, 1, 64, 64}, 1)); }, {"Conv2d"});
}

BOOST_AUTO_TEST_CASE(options_are_checked) {
  test_util::check_error<mg::ValueError>([] { models::resnet18({.num_classes = 0}); }, {"ResNet", "num_classes"});
  test_util::check_error<mg::ValueError>([] { models::ResNet(models::ResNetBlock::basic, {2, 0, 2, 2}); },
                                         {"ResNet", "block"});
  test_util::check_error<mg::ValueError>([] { models::vgg16({.num_classes = 0}); }, {"VGG", "num_classes"});
  test_util::check_error<mg::ValueError>([] { models::vgg_features({64, -1}, false); }, {"vgg_features", "-1"});
  auto net = models::resnet18({.num_classes = 3});
  test_util::check_error<mg::ValueError>([&] { net.layer(5); }, {"ResNet::layer", "5"});
  BOOST_TEST(net.layer(4).size() == 2u);
}

// torchvision: conv weights N(0, 2 / fan_out) (kaiming_normal, fan_out,
// relu), batch norm 1 and 0; VGG's linear weights N(0, 0.01^2), biases 0;
// ResNet's fc keeps Linear's U(-1/sqrt(in), 1/sqrt(in)).
BOOST_AUTO_TEST_CASE(initialisation_is_torchvisions) {
  mg::manual_seed(3);
  auto r18 = models::resnet18();
  const auto [m1, s1] = moments(r18["conv1"].as<nn::Conv2d>()->weight());
  BOOST_TEST(std::abs(m1) < 0.002);
  BOOST_TEST(std::abs(s1 / std::sqrt(2.0 / (64 * 49)) - 1) < 0.05, "std " << s1);
  const auto [m3, s3] = moments(r18["layer3"][1]["conv2"].as<nn::Conv2d>()->weight());
  BOOST_TEST(std::abs(s3 / std::sqrt(2.0 / (256 * 9)) - 1) < 0.02, "std " << s3);
  BOOST_TEST(all_equal(r18["bn1"].as<nn::BatchNorm2d>()->weight(), 1.0f));
  BOOST_TEST(all_equal(r18["layer1"][0]["bn2"].as<nn::BatchNorm2d>()->bias(), 0.0f));
  const auto [mf, sf] = moments(r18.fc().weight());
  BOOST_TEST(std::abs(sf / (1 / std::sqrt(3.0 * 512)) - 1) < 0.02, "fc std " << sf);  // U(-b, b): b / sqrt(3)

  auto vgg = models::vgg16();
  const auto [mc, sc] = moments(vgg["classifier"][0].as<nn::Linear>()->weight());
  BOOST_TEST(std::abs(sc / 0.01 - 1) < 0.01, "classifier.0 std " << sc);
  BOOST_TEST(all_equal(vgg["classifier"][6].as<nn::Linear>()->bias(), 0.0f));
  BOOST_TEST(all_equal(vgg["features"][28].as<nn::Conv2d>()->bias(), 0.0f));
  const auto [m0, s0] = moments(vgg["features"][0].as<nn::Conv2d>()->weight());
  BOOST_TEST(std::abs(s0 / std::sqrt(2.0 / (64 * 9)) - 1) < 0.1, "features.0 std " << s0);
}

BOOST_AUTO_TEST_CASE(zero_init_residual_zeroes_each_blocks_last_norm) {
  auto r50 = models::resnet50({.zero_init_residual = true});
  BOOST_TEST(all_equal(r50["layer1"][0]["bn3"].as<nn::BatchNorm2d>()->weight(), 0.0f));
  BOOST_TEST(all_equal(r50["layer4"][2]["bn3"].as<nn::BatchNorm2d>()->weight(), 0.0f));
  BOOST_TEST(all_equal(r50["layer1"][0]["bn2"].as<nn::BatchNorm2d>()->weight(), 1.0f));
  BOOST_TEST(all_equal(r50["layer1"][0]["downsample"][1].as<nn::BatchNorm2d>()->weight(), 1.0f));
  auto r18 = models::resnet18({.zero_init_residual = true});
  BOOST_TEST(all_equal(r18["layer2"][1]["bn2"].as<nn::BatchNorm2d>()->weight(), 0.0f));
  BOOST_TEST(all_equal(r18["layer2"][1]["bn1"].as<nn::BatchNorm2d>()->weight(), 1.0f));
  BOOST_TEST(all_equal(models::resnet18()["layer2"][1]["bn2"].as<nn::BatchNorm2d>()->weight(), 1.0f));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(fine_tuning)

// The Enchanter guide's `model.classifier[6] = nn.Linear(4096, 10)`, and
// freezing the convolutional features.
BOOST_AUTO_TEST_CASE(vgg16_head_swap_and_frozen_features) {
  auto net = models::vgg16();
  net["classifier"][6] = nn::Linear(4096, 10);
  BOOST_TEST(dims(shape_of(net, "classifier.6.weight")) == "10,4096");
  BOOST_TEST(net.classifier().at<nn::Linear>(6)->out_features() == 10);
  net["features"].freeze();
  const auto trainable = net.named_trainable_parameters();
  BOOST_TEST_REQUIRE(trainable.size() == 6u);
  for (const auto& [name, t] : trainable) BOOST_TEST(name.rfind("classifier.", 0) == 0, name);
  net.eval();
  BOOST_TEST(mg::to_string(net(image(1, 32)).shape()) == "[1, 10]");
}

// torchvision's `model.fc = nn.Linear(512, 10)`, a frozen backbone, and one
// backward: the head gets its gradient, the backbone none.
BOOST_AUTO_TEST_CASE(resnet18_head_swap_trains_the_head_alone) {
  auto net = models::resnet18();
  net["fc"] = nn::Linear(512, 10);
  BOOST_TEST(net.fc().out_features() == 10);  // the typed member sees the new layer
  net.freeze();
  net["fc"].unfreeze();
  BOOST_TEST(net.trainable_parameters().size() == 2u);

  mg::autodiff::GradManager gm;
  gm.attach(net.trainable_parameters());
  const mg::Tensor y = mg::tensor(std::vector<int64_t>{3, 7}, {2});
  auto step = [&] {
    auto recording = gm.record();
    gm.backward(mg::F::cross_entropy(net(image(2, 32)), y));
  };
  // Frozen or not, a batch norm in training mode updates its running
  // statistics (as in PyTorch); in eval mode it keeps them.
  const mg::Tensor& running = net["bn1"].as<nn::BatchNorm2d>()->running_mean();
  const std::vector<float> initial = running.to_vector<float>();
  step();
  BOOST_TEST(net.fc().weight().grad().defined());
  BOOST_TEST(!net["conv1"].as<nn::Conv2d>()->weight().grad().defined());
  BOOST_TEST(!net["layer4"][1]["bn2"].as<nn::BatchNorm2d>()->weight().grad().defined());
  const std::vector<float> trained = running.to_vector<float>();
  BOOST_TEST((trained != initial));
  net.eval();
  step();
  BOOST_TEST((running.to_vector<float>() == trained));
}

BOOST_AUTO_TEST_SUITE_END()
