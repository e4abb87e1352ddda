// Module machinery: registration, naming, train/eval, state dicts,
// Sequential. The modules here are defined in the test so that only shape
// ops are needed.
#include <boost/test/unit_test.hpp>

#include <sstream>

#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

namespace {

// y = reshape(x); holds a weight, an optional bias and a buffer.
struct Toy : nn::Module {
  explicit Toy(int64_t n, bool with_bias = true) {
    weight = register_parameter("weight", mg::full({n, 2}, static_cast<double>(n)));
    if (with_bias) bias = register_parameter("bias", mg::zeros({n}));
    stat = register_buffer("stat", mg::ones({n}));
  }
  mg::Tensor forward(const mg::Tensor& x) override { return mg::F::reshape(x, {-1, weight.shape()[0]}); }
  std::string describe() const override { return "Toy(" + std::to_string(weight.shape()[0]) + ")"; }
  mg::Tensor weight, bias, stat;
};

struct Net : nn::Module {
  mg::Tensor scale = register_parameter("scale", mg::ones({1}));
  std::shared_ptr<Toy> a = register_module("a", Toy(3));
  std::shared_ptr<nn::Sequential> body = register_module("body", nn::Sequential(Toy(4), Toy(2, false)));
  mg::Tensor forward(const mg::Tensor& x) override { return (*body)((*a)(x)); }
};

std::vector<std::string> names(const std::vector<nn::NamedTensor>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(module)

BOOST_AUTO_TEST_CASE(parameters_in_registration_order_with_dotted_names) {
  Net net;
  const std::vector<std::string> want = {"scale", "a.weight", "a.bias", "body.0.weight", "body.0.bias", "body.1.weight"};
  BOOST_TEST(names(net.named_parameters()) == want, boost::test_tools::per_element());
  const auto ps = net.parameters();
  BOOST_REQUIRE_EQUAL(ps.size(), 6u);
  BOOST_TEST(ps[1].impl() == net.a->weight.impl());  // the same tensor, not a copy
  BOOST_TEST(names(net.named_buffers()) == std::vector<std::string>({"a.stat", "body.0.stat", "body.1.stat"}),
             boost::test_tools::per_element());
  BOOST_TEST(net.buffers().size() == 3u);
  BOOST_TEST(net.children().size() == 2u);
  BOOST_TEST(net.named_children()[1].first == "body");
}

BOOST_AUTO_TEST_CASE(shared_modules_are_listed_once) {
  auto shared = std::make_shared<Toy>(2);
  nn::Sequential seq;
  seq.push_back(shared).push_back(shared);
  BOOST_TEST(seq.size() == 2u);
  BOOST_TEST(seq.parameters().size() == 2u);
  BOOST_TEST(seq.state_dict().size() == 6u);  // both names are saved, as PyTorch does
}

BOOST_AUTO_TEST_CASE(train_and_eval_propagate) {
  Net net;
  BOOST_TEST(net.is_training());
  net.eval();
  BOOST_TEST(!net.is_training());
  BOOST_TEST(!net.a->is_training());
  BOOST_TEST(!(*net.body)[1].is_training());
  net.train();
  BOOST_TEST((*net.body)[0].is_training());
  net.body->train(false);
  BOOST_TEST(net.is_training());
  BOOST_TEST(!(*net.body)[0].is_training());
}

BOOST_AUTO_TEST_CASE(state_dict_order_and_snapshot) {
  Net net;
  const auto sd = net.state_dict();
  const std::vector<std::string> want = {"scale",         "a.weight",    "a.bias",        "a.stat",
                                         "body.0.weight", "body.0.bias", "body.0.stat",   "body.1.weight",
                                         "body.1.stat"};
  BOOST_TEST(sd.keys() == want, boost::test_tools::per_element());
  BOOST_TEST(sd.at("a.weight").raw_data() != net.a->weight.raw_data());
  net.a->weight.data<float>()[0] = 42.f;
  BOOST_TEST(sd.at("a.weight").at<float>({0, 0}) == 3.f);
}

BOOST_AUTO_TEST_CASE(load_state_dict_copies_into_the_same_storage) {
  Net src, dst;
  src.a->weight.data<float>()[1] = -7.f;
  src.body->at<Toy>(0)->stat.data<float>()[2] = 5.f;
  const void* storage = dst.a->weight.raw_data();
  const mg::Tensor handle = dst.a->weight;
  const uint64_t version = handle.version();
  dst.load_state_dict(src.state_dict());
  BOOST_TEST(handle.version() > version);
  BOOST_TEST(dst.a->weight.raw_data() == storage);
  BOOST_TEST(handle.at<float>({0, 1}) == -7.f);
  BOOST_TEST(dst.body->at<Toy>(0)->stat.at<float>({2}) == 5.f);
}

BOOST_AUTO_TEST_CASE(load_state_dict_checks_everything_first) {
  Net net;
  const auto good = net.state_dict();
  auto with = [&](auto edit) {
    mg::StateDict d;
    for (const auto& [k, v] : good) d.insert(k, v.clone());
    d.insert_or_assign("scale", mg::full({1}, 9.0));  // a change that must not land
    edit(d);
    return d;
  };
  auto unchanged = [&] { BOOST_TEST(net.scale.item<float>() == 1.f); };

  BOOST_CHECK_THROW(net.load_state_dict(with([](mg::StateDict& d) { d.erase("body.1.stat"); })), mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW(net.load_state_dict(with([](mg::StateDict& d) { d.insert("extra", mg::ones({1})); })),
                    mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW(net.load_state_dict(with([](mg::StateDict& d) { d.insert_or_assign("body.1.weight", mg::ones({3, 2})); })),
                    mg::ShapeError);
  unchanged();
  BOOST_CHECK_THROW(net.load_state_dict(with([](mg::StateDict& d) {
                      d.insert_or_assign("a.bias", mg::zeros({3}, mg::DType::float64));
                    })),
                    mg::DTypeError);
  unchanged();
  try {
    net.load_state_dict(with([](mg::StateDict& d) { d.erase("a.bias"); d.insert("a.bais", mg::zeros({3})); }));
    BOOST_FAIL("expected ValueError");
  } catch (const mg::ValueError& e) {
    const std::string msg = e.what();
    BOOST_TEST(msg.find("'a.bias'") != std::string::npos);
    BOOST_TEST(msg.find("'a.bais'") != std::string::npos);
  }
  unchanged();

  // Non-strict: unknown and missing keys are ignored, the rest loads.
  net.load_state_dict(with([](mg::StateDict& d) { d.erase("a.bias"); d.insert("extra", mg::ones({1})); }),
                      {.strict = false});
  BOOST_TEST(net.scale.item<float>() == 9.f);
}

BOOST_AUTO_TEST_CASE(registration_errors) {
  struct Bad : nn::Module {
    mg::Tensor forward(const mg::Tensor& x) override { return x; }
    void add(const std::string& n, mg::Tensor t) { register_parameter(n, std::move(t)); }
    void add_buffer(const std::string& n, mg::Tensor t) { register_buffer(n, std::move(t)); }
  };
  Bad m;
  m.add("w", mg::ones({2}));
  BOOST_CHECK_THROW(m.add("w", mg::ones({2})), mg::ValueError);
  BOOST_CHECK_THROW(m.add_buffer("w", mg::ones({2})), mg::ValueError);
  BOOST_CHECK_THROW(m.add("a.b", mg::ones({2})), mg::ValueError);
  BOOST_CHECK_THROW(m.add("", mg::ones({2})), mg::ValueError);
  BOOST_CHECK_THROW(m.add("i", mg::arange(3)), mg::DTypeError);
  BOOST_CHECK_THROW(m.add("u", mg::Tensor()), mg::StateError);
  BOOST_CHECK_NO_THROW(m.add_buffer("count", mg::arange(3)));  // buffers may be integer
  BOOST_TEST(m.parameters().size() == 1u);
}

BOOST_AUTO_TEST_CASE(sequential_container) {
  auto seq = nn::Sequential(Toy(2), Toy(3, false));
  BOOST_TEST(seq.size() == 2u);
  Toy moved(5);
  seq.push_back(std::move(moved));
  BOOST_TEST(seq.size() == 3u);
  BOOST_TEST(names(seq.named_parameters()) ==
                 std::vector<std::string>({"0.weight", "0.bias", "1.weight", "2.weight", "2.bias"}),
             boost::test_tools::per_element());
  BOOST_TEST(seq[1].describe() == "Toy(3)");
  BOOST_TEST(seq.at<Toy>(2)->weight.shape() == mg::Shape({5, 2}));
  BOOST_CHECK_THROW(seq[3], mg::ShapeError);
  BOOST_CHECK_THROW(seq.at<nn::Sequential>(0), mg::StateError);
  // forward chains: [30] -> [15, 2] -> [10, 3] -> [6, 5]
  const auto y = seq(mg::arange(0.0, 30.0));
  BOOST_TEST(y.shape() == mg::Shape({6, 5}));
  BOOST_TEST(nn::Sequential()(mg::ones({2})).shape() == mg::Shape({2}));
  std::ostringstream os;
  os << nn::Sequential(Toy(1), nn::Sequential(Toy(2)));
  BOOST_TEST(os.str() == "Sequential(\n  (0): Toy(1)\n  (1): Sequential(\n    (0): Toy(2)\n  )\n)");
}

BOOST_AUTO_TEST_CASE(grad_manager_sees_module_parameters) {
  Net net;
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  const auto attached = gm.attached_tensors();
  BOOST_REQUIRE_EQUAL(attached.size(), 6u);
  BOOST_TEST(attached[0].id() == net.scale.id());
  // Loading a state dict keeps the attached handles valid (same tensors).
  net.load_state_dict(net.state_dict());
  BOOST_TEST(gm.attached_tensors().size() == 6u);
}

BOOST_AUTO_TEST_SUITE_END()
