// Model surgery as PyTorch's fine-tuning code does it: Sequential element
// assignment and insertion, children by name, freezing, and a fine-tuning
// run (frozen backbone, new head, autocast + GradScaler).
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

namespace {

// torchvision's shape in small: a backbone, a Sequential classifier, and a
// typed member `fc` that forward() calls directly.
struct Net : nn::Module {
  std::shared_ptr<nn::Sequential> features =
      register_module("features", nn::Sequential(nn::Linear(6, 16), nn::ReLU()));
  std::shared_ptr<nn::Sequential> classifier =
      register_module("classifier", nn::Sequential(nn::Linear(16, 16), nn::ReLU(), nn::Linear(16, 4)));
  std::shared_ptr<nn::Linear> fc = register_module("fc", nn::Linear(4, 4));
  mg::Tensor forward(const mg::Tensor& x) override { return (*fc)((*classifier)((*features)(x))); }
  std::string describe() const override { return "Net"; }
};

std::vector<float> values(const mg::Tensor& t) { return t.to(mg::DType::float32).to_vector<float>(); }

// Every key, shape and value of a state dict, for before / after comparisons.
struct Snapshot {
  std::vector<std::string> keys;
  std::vector<mg::Shape> shapes;
  std::vector<std::vector<float>> data;
  std::vector<const mg::TensorImpl*> handles;  // the parameters' identities

  explicit Snapshot(const nn::Module& m) {
    const mg::StateDict sd = m.state_dict();
    keys = sd.keys();
    for (const auto& k : keys) {
      shapes.push_back(sd.find(k)->shape());
      data.push_back(values(*sd.find(k)));
    }
    for (const auto& p : m.parameters()) handles.push_back(p.impl());
  }
  bool operator==(const Snapshot&) const = default;
};

mg::Shape shape_of(const nn::Module& m, const std::string& key) { return m.state_dict().find(key)->shape(); }

template <class E>
void check_throws(const std::function<void()>& f, const std::vector<std::string>& words) {
  try {
    f();
    BOOST_ERROR("no exception");
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& w : words) BOOST_TEST(msg.find(w) != std::string::npos, "'" << w << "' not in: " << msg);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(surgery)

BOOST_AUTO_TEST_CASE(sequential_element_assignment_replaces_in_place_of_the_name) {
  mg::manual_seed(0);
  nn::Sequential seq(nn::Linear(4, 5), nn::ReLU(), nn::Linear(5, 6));
  const auto old_head = seq.at<nn::Linear>(2);
  const mg::Tensor x = mg::normal({3, 4});
  BOOST_TEST(seq(x).shape() == mg::Shape({3, 6}));

  seq[2] = nn::Linear(5, 3);
  BOOST_TEST(seq(x).shape() == mg::Shape({3, 3}));
  BOOST_TEST(seq.size() == 3u);
  const std::vector<std::string> keys = {"0.weight", "0.bias", "2.weight", "2.bias"};
  BOOST_TEST(seq.state_dict().keys() == keys, boost::test_tools::per_element());
  BOOST_TEST(shape_of(seq, "2.weight") == mg::Shape({3, 5}));
  // The new module took the place; a handle to the old one still holds it, as in torch.
  BOOST_TEST(seq.at<nn::Linear>(-1) != old_head);
  BOOST_TEST(old_head->weight().shape() == mg::Shape({6, 5}));
  BOOST_TEST(seq.parameters().size() == 4u);
  BOOST_TEST(seq.parameters()[2].impl() == seq.at<nn::Linear>(2)->weight().impl());

  // Any module fits in a Sequential's place, by value or shared; it takes the training mode.
  seq.eval();
  seq[1] = nn::Linear(5, 5);
  BOOST_TEST(seq[1].describe().find("Linear") == 0u);
  BOOST_TEST(!seq[1].is_training());
  BOOST_TEST(shape_of(seq, "1.weight") == mg::Shape({5, 5}));
  auto shared = std::make_shared<nn::ReLU>();
  seq[-2] = shared;
  BOOST_TEST(seq.child("1") == shared);
  BOOST_TEST(seq.parameters().size() == 4u);
}

BOOST_AUTO_TEST_CASE(classifier_element_by_name_then_index_as_torch) {
  mg::manual_seed(0);
  Net net;
  const mg::Tensor x = mg::normal({2, 6});
  net["classifier"][2] = nn::Linear(16, 10);  // torch: net.classifier[2] = nn.Linear(16, 10)
  BOOST_TEST(shape_of(net, "classifier.2.weight") == mg::Shape({10, 16}));
  BOOST_TEST(shape_of(net, "classifier.2.bias") == mg::Shape({10}));
  BOOST_TEST(net.classifier->at<nn::Linear>(2)->weight().shape() == mg::Shape({10, 16}));
  // fc still expects 4 features: the forward now fails on the shapes, as it would in torch.
  BOOST_CHECK_THROW(net(x), mg::ShapeError);
  net["fc"] = nn::Linear(10, 2);  // the typed member sees the new layer
  BOOST_TEST(net.fc->weight().shape() == mg::Shape({2, 10}));
  BOOST_TEST(net(x).shape() == mg::Shape({2, 2}));
  BOOST_TEST(shape_of(net, "fc.weight") == mg::Shape({2, 10}));
  BOOST_TEST(net["classifier"][-1]->describe() == net.classifier->at<nn::Linear>(2)->describe());
  BOOST_TEST(net["features"](x).shape() == mg::Shape({2, 16}));
  BOOST_TEST(net["fc"].as<nn::Linear>() == net.fc);
  BOOST_TEST(net.replace_child("fc", nn::Linear(10, 3)) == net.fc);
  BOOST_TEST(net(x).shape() == mg::Shape({2, 3}));
}

BOOST_AUTO_TEST_CASE(insert_and_append_shift_the_names) {
  nn::Sequential seq(nn::Linear(2, 3), nn::ReLU(), nn::Linear(3, 4));
  seq.insert(1, nn::Linear(3, 3));
  std::vector<std::string> keys = {"0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"};
  BOOST_TEST(seq.state_dict().keys() == keys, boost::test_tools::per_element());
  BOOST_TEST(shape_of(seq, "3.weight") == mg::Shape({4, 3}));
  seq.insert(-1, nn::ReLU());  // before the last, as Python's list.insert
  BOOST_TEST(seq[-2].describe() == "ReLU()");
  BOOST_TEST(shape_of(seq, "4.weight") == mg::Shape({4, 3}));
  seq.insert(static_cast<int64_t>(seq.size()), nn::Linear(4, 1));  // at size(): appends
  seq.append(nn::ReLU());
  BOOST_TEST(seq.size() == 7u);
  BOOST_TEST(shape_of(seq, "5.weight") == mg::Shape({1, 4}));
  BOOST_TEST(seq(mg::ones({2, 2})).shape() == mg::Shape({2, 1}));
  seq.insert(-7, nn::Linear(2, 2));  // -size(): the front
  BOOST_TEST(shape_of(seq, "0.weight") == mg::Shape({2, 2}));
  BOOST_TEST(shape_of(seq, "1.weight") == mg::Shape({3, 2}));
}

BOOST_AUTO_TEST_CASE(bad_indices_throw_and_change_nothing) {
  nn::Sequential seq(nn::Linear(2, 3), nn::ReLU(), nn::Linear(3, 4));
  const Snapshot before(seq);
  check_throws<mg::ShapeError>([&] { seq[3] = nn::Linear(3, 4); }, {"operator[]", "index 3", "3 modules"});
  check_throws<mg::ShapeError>([&] { seq[-4] = nn::Linear(3, 4); }, {"operator[]", "index -4", "3 modules"});
  check_throws<mg::ShapeError>([&] { seq.insert(4, nn::ReLU()); }, {"insert", "index 4", "3 modules"});
  check_throws<mg::ShapeError>([&] { seq.insert(-4, nn::ReLU()); }, {"insert", "index -4", "3 modules"});
  check_throws<mg::ShapeError>([&] { seq.at<nn::Linear>(7); }, {"at", "index 7", "3 modules"});
  check_throws<mg::ShapeError>([&] { std::as_const(seq)[5]; }, {"index 5"});
  BOOST_TEST((Snapshot(seq) == before));
  BOOST_TEST(seq.size() == 3u);
}

BOOST_AUTO_TEST_CASE(bad_names_and_types_throw_and_change_nothing) {
  Net net;
  const Snapshot before(net);
  check_throws<mg::ValueError>([&] { net["clasifier"]; }, {"operator[]", "'clasifier'", "'features'", "'fc'"});
  check_throws<mg::ValueError>([&] { net.child("x"); }, {"'x'", "'classifier'"});
  // fc is a typed member of Net's forward: another type cannot take its place.
  check_throws<mg::ValueError>([&] { net["fc"] = nn::ReLU(); }, {"replace_child", "'fc'", "Sequential"});
  check_throws<mg::ValueError>([&] { net["fc"] = std::make_shared<nn::Linear>(4, 4); }, {"'fc'", "by value"});
  check_throws<mg::ValueError>([&] { net.replace_child("head", nn::Linear(4, 4)); }, {"'head'", "'fc'"});
  check_throws<mg::ValueError>([&] { net["fc"][0]; }, {"not a container", "element 0"});
  check_throws<mg::StateError>([&] { net["fc"].as<nn::ReLU>(); }, {"'fc'", "Linear"});
  check_throws<mg::ShapeError>([&] { net["classifier"][3] = nn::ReLU(); }, {"index 3", "3 modules"});
  BOOST_TEST((Snapshot(net) == before));
}

BOOST_AUTO_TEST_CASE(frozen_parameters_get_no_gradient_and_no_update) {
  mg::manual_seed(1);
  Net net;
  mg::autodiff::GradManager gm;
  int frozen_calls = 0;
  gm.attach(net.parameters());  // all of them: freezing after attach still holds
  gm.attach(net.features->parameters(), {[&](const mg::Tensor&, const mg::Tensor& g) {
              ++frozen_calls;
              return g;
            }});
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  net["features"].freeze();
  BOOST_TEST(net.trainable_parameters().size() == net.parameters().size() - 2);
  BOOST_TEST(net.named_trainable_parameters()[0].first == "classifier.0.weight");
  for (const auto& p : net.features->parameters()) BOOST_TEST(mg::autodiff::is_frozen(p));

  const auto frozen_before = net.features->state_dict();
  const auto head_before = values(net.fc->weight());
  const mg::Tensor x = mg::normal({5, 6});
  for (int step = 0; step < 2; ++step) {
    {
      auto recording = gm.record();
      gm.backward(mg::F::sum(net(x)));
    }
    for (const auto& p : net.features->parameters()) BOOST_TEST(!p.grad().defined());
    for (const auto& p : net.trainable_parameters()) BOOST_TEST(p.grad().defined());
    opt.step().clear_grad();
  }
  BOOST_TEST(frozen_calls == 0);  // no gradient reached them: none was computed
  for (const auto& k : frozen_before.keys())
    BOOST_TEST(values(*net.features->state_dict().find(k)) == values(*frozen_before.find(k)),
               boost::test_tools::per_element());
  BOOST_TEST(values(net.fc->weight()) != head_before);

  // Freezing drops a gradient already there; it is refused while recording.
  net.fc->weight().set_grad(mg::ones_like(net.fc->weight()));
  net["fc"].freeze();
  BOOST_TEST(!net.fc->weight().grad().defined());
  {
    auto recording = gm.record();
    BOOST_CHECK_THROW(net.unfreeze(), mg::StateError);
  }
  BOOST_TEST(mg::autodiff::is_frozen(net.fc->weight()));
  net.unfreeze();
  BOOST_TEST(net.trainable_parameters().size() == net.parameters().size());
  {
    auto recording = gm.record();
    gm.backward(mg::F::sum(net(x)));
  }
  for (const auto& p : net.parameters()) BOOST_TEST(p.grad().defined());
  BOOST_TEST(frozen_calls == 2);
}

BOOST_AUTO_TEST_CASE(fine_tuning_a_new_head_on_a_frozen_backbone_under_autocast) {
  mg::manual_seed(2);
  Net net;
  net["classifier"][2] = nn::Linear(16, 4);
  net["fc"] = nn::Linear(4, 3);
  net["features"].freeze();
  const auto backbone = net.features->state_dict();

  mg::autodiff::GradManager gm;
  gm.attach(net.trainable_parameters());
  mg::optim::SGD opt(net.trainable_parameters(), {.lr = 0.1, .momentum = 0.9});
  mg::amp::GradScaler scaler;
  const mg::Tensor x = mg::normal({24, 6});
  // A learnable target: which of the first three inputs is largest.
  const std::vector<float> xs = x.to_vector<float>();
  std::vector<int64_t> labels;
  for (size_t i = 0; i < 24; ++i) {
    const float* r = &xs[6 * i];
    labels.push_back(r[0] >= r[1] && r[0] >= r[2] ? 0 : (r[1] >= r[2] ? 1 : 2));
  }
  const mg::Tensor y = mg::tensor(labels, {24});

  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    mg::Tensor loss;
    {
      auto recording = gm.record();
      mg::amp::autocast ac;
      loss = mg::F::cross_entropy(net(x), y);
      gm.backward(scaler.scale(loss));
    }
    scaler.step(opt);
    scaler.update();
    opt.clear_grad();
    (step == 0 ? first : last) = loss.item<double>();
  }
  BOOST_TEST(last < 0.5 * first);
  for (const auto& k : backbone.keys())
    BOOST_TEST(values(*net.features->state_dict().find(k)) == values(*backbone.find(k)),
               boost::test_tools::per_element());
  for (const auto& p : net.features->parameters()) BOOST_TEST(!p.grad().defined());
}

BOOST_AUTO_TEST_SUITE_END()
