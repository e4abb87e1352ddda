// Memory formats (channels-last): the tensor API, ops that keep the format
// (conv -> batch norm -> relu -> pool -> add, and their gradients), the
// state dict's logical order, and MegEngine's convert_module_format /
// convert_tensor_format behaviours (test_convert_module, test_format_remained).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "backend/onednn/onednn.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace F = mixgrad::F;
using mg::MemoryFormat;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::channels_last;

// The message of what `fn` throws as E ("no error" if nothing).
template <class E, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

// conv -> batch norm -> relu -> max pool -> add (a residual of the pooled
// input), the chain whose format the ops keep.
struct Block : nn::Module {
  std::shared_ptr<nn::Conv2d> conv = register_module("conv", nn::Conv2d(4, 8, 3, {.padding = 1}));
  std::shared_ptr<nn::BatchNorm2d> bn = register_module("bn", nn::BatchNorm2d(8));
  std::shared_ptr<nn::Conv2d> skip = register_module("skip", nn::Conv2d(4, 8, 1, {.stride = 2, .bias = false}));
  mg::Tensor forward(const mg::Tensor& x) override {
    const mg::Tensor h = F::max_pool2d(F::relu((*bn)(F::conv2d(x, conv->weight(), conv->bias(), {.padding = 1}))),
                                       {.kernel_size = 2, .stride = 2});
    return F::add(h, (*skip)(x));
  }
};

// `cl` takes `ref`'s parameters and buffers, then goes channels-last.
void take_converted(Block& cl, const Block& ref) {
  cl.load_state_dict(ref.state_dict());
  mg::amp::convert_module_format(cl);
}

struct Run {
  mg::Tensor y, gx;
  std::vector<mg::Tensor> grads;
};

// One forward and backward of `net` on x (float32), the loss weighting each
// output element differently so every gradient is distinct.
Run run_block(Block& net, const mg::Tensor& x_in) {
  mg::Tensor x = x_in.detach();
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  gm.attach({x});
  Run r;
  {
    auto rec = gm.record();
    r.y = net(x);
    const mg::Tensor w = mg::arange(0.0, static_cast<double>(r.y.numel()), 1.0).reshape(r.y.shape());
    gm.backward(F::sum(F::mul(r.y, F::sin(w))));
  }
  r.gx = x.grad();
  for (const mg::Tensor& p : net.parameters()) r.grads.push_back(p.grad());
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(memory_format)

BOOST_AUTO_TEST_CASE(channels_last_strides_and_queries) {
  const mg::Tensor x = mg::arange(0.0, 120.0, 1.0).reshape({2, 3, 4, 5});
  const mg::Tensor c = x.contiguous(kCL);
  BOOST_TEST(c.shape() == mg::Shape({2, 3, 4, 5}));
  BOOST_TEST(c.strides() == mg::Shape({60, 1, 15, 3}));
  BOOST_TEST(c.is_contiguous(kCL));
  BOOST_TEST(!c.is_contiguous());
  BOOST_TEST((c.suggest_memory_format() == kCL));
  BOOST_TEST((x.suggest_memory_format() == MemoryFormat::contiguous));
  BOOST_TEST(c.to_vector<double>() == x.to_vector<double>(), boost::test_tools::per_element());
  BOOST_TEST(c.at<double>({1, 2, 3, 4}) == 119.0);
  BOOST_TEST(c.contiguous(kCL).impl() == c.impl());  // already so: the same tensor
  BOOST_TEST(c.contiguous().strides() == x.strides());
  // Extent-1 channels or images: both layouts at once, suggested contiguous.
  const mg::Tensor one = mg::zeros({2, 1, 4, 5}).contiguous(kCL);
  BOOST_TEST(one.is_contiguous());
  BOOST_TEST(one.is_contiguous(kCL));
  BOOST_TEST((one.suggest_memory_format() == MemoryFormat::contiguous));
  // channels_last_3d: [N, C, D, H, W] as N, D, H, W, C.
  const mg::Tensor v = mg::zeros({2, 3, 4, 5, 6}).contiguous(MemoryFormat::channels_last_3d);
  BOOST_TEST(v.strides() == mg::Shape({360, 1, 90, 18, 3}));
  BOOST_TEST((v.suggest_memory_format() == MemoryFormat::channels_last_3d));
  BOOST_TEST(!v.is_contiguous(kCL));
  BOOST_TEST(mg::empty({1, 2, 3, 4}, mg::DType::bfloat16, mg::Device::cpu(), kCL).strides() ==
             mg::Shape({24, 1, 8, 2}));
}

// A rank the format lacks: a typed error naming the op, the shape and the
// dtype, for contiguous(format), convert_tensor_format and empty.
BOOST_AUTO_TEST_CASE(channels_last_of_other_ranks_is_refused) {
  const mg::Tensor t = mg::zeros({2, 3, 4}, mg::DType::bfloat16);
  BOOST_TEST(message_of<mg::ShapeError>([&] { (void)t.contiguous(kCL); }) ==
             "contiguous(channels_last): expected a 4-d [N, C, H, W] tensor, got bfloat16[2, 3, 4]");
  BOOST_TEST(message_of<mg::ShapeError>([&] { (void)mg::amp::convert_tensor_format(t); }) ==
             "convert_tensor_format: expected a 4-d [N, C, H, W] or 5-d [N, C, D, H, W] tensor, got bfloat16[2, 3, 4]");
  const mg::Tensor four = mg::zeros({2, 3, 4, 5});
  BOOST_TEST(message_of<mg::ShapeError>([&] { (void)four.contiguous(MemoryFormat::channels_last_3d); }) ==
             "contiguous(channels_last_3d): expected a 5-d [N, C, D, H, W] tensor, got float32[2, 3, 4, 5]");
  BOOST_CHECK_THROW(mg::empty({2, 3}, mg::DType::float32, mg::Device::cpu(), kCL), mg::ShapeError);
  BOOST_TEST(!t.is_contiguous(kCL));
  BOOST_TEST((t.suggest_memory_format() == MemoryFormat::contiguous));
}

// Elementwise ops keep the layout of their first full-shape operand, a
// broadcast operand (a per-channel bias) aside; casts keep it too.
BOOST_AUTO_TEST_CASE(elementwise_ops_keep_the_format) {
  const mg::Tensor a = mg::uniform({2, 3, 4, 5}).contiguous(kCL);
  const mg::Tensor b = mg::uniform({2, 3, 4, 5});
  const mg::Tensor bias = mg::uniform({1, 3, 1, 1});
  BOOST_TEST((F::relu(a).suggest_memory_format() == kCL));
  BOOST_TEST((F::add(a, bias).suggest_memory_format() == kCL));
  BOOST_TEST((F::add(bias, a).suggest_memory_format() == kCL));
  BOOST_TEST((F::mul(a, 2.0).suggest_memory_format() == kCL));
  BOOST_TEST((F::add(a, b).suggest_memory_format() == kCL));
  BOOST_TEST((F::add(b, a).suggest_memory_format() == MemoryFormat::contiguous));
  BOOST_TEST((a.to(mg::DType::bfloat16).suggest_memory_format() == kCL));
  BOOST_TEST((F::gt(a, 0.5).suggest_memory_format() == kCL));
  test_util::check_close(F::add(a, b), F::add(a.contiguous(), b), 0.0);
  test_util::check_close(F::exp(a), F::exp(a.contiguous()), 0.0);
}

// conv -> bn -> relu -> pool -> add on a channels-last input and model:
// every result channels-last, values and gradients those of the contiguous
// run. oneDNN's NHWC kernels and the batch norm's row path sum in another
// order than the NCHW ones, so the match is to float32 rounding (1e-5
// relative), not bit for bit.
BOOST_AUTO_TEST_CASE(format_kept_through_conv_bn_relu_pool_add) {
  mg::manual_seed(11);
  Block ref;
  Block cl;
  take_converted(cl, ref);
  BOOST_TEST((cl.conv->weight().suggest_memory_format() == kCL));
  const mg::Tensor x = mg::uniform({2, 4, 10, 12});
  const Run want = run_block(ref, x);
  const Run got = run_block(cl, mg::amp::convert_tensor_format(x));
  BOOST_TEST((got.y.suggest_memory_format() == kCL));
  BOOST_TEST((got.gx.suggest_memory_format() == kCL));
  BOOST_TEST((cl.conv->weight().grad().suggest_memory_format() == kCL));
  BOOST_TEST((want.y.suggest_memory_format() == MemoryFormat::contiguous));
  test_util::check_close(got.y, want.y, 1e-5);
  test_util::check_close(got.gx, want.gx, 1e-5);
  BOOST_TEST_REQUIRE(got.grads.size() == want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) test_util::check_close(got.grads[i], want.grads[i], 1e-5);
  // The running statistics the batch norm updated agree too.
  test_util::check_close(cl.bn->running_var(), ref.bn->running_var(), 1e-6);
}

// conv2d's gradients on a channels-last float64 input and weight against
// central finite differences, element by element in the logical order.
BOOST_AUTO_TEST_CASE(conv2d_channels_last_float64_finite_differences) {
  mg::manual_seed(12);
  const mg::Tensor x = mg::uniform({2, 3, 5, 4}, 0.0, 1.0, mg::DType::float64).contiguous(kCL);
  const mg::Tensor w = mg::uniform({4, 3, 3, 2}, 0.0, 1.0, mg::DType::float64).contiguous(kCL);
  const mg::Tensor b = mg::uniform({4}, 0.0, 1.0, mg::DType::float64);
  const mg::Tensor mix = F::sin(mg::arange(0.0, 2 * 4 * 3 * 5, 1.0, mg::DType::float64).reshape({2, 4, 3, 5}));
  const F::Conv2dOptions o{.stride = {2, 1}, .padding = {1, 1}};
  auto loss = [&] {
    return F::sum(F::mul(F::conv2d(x, w, b, o), mix)).item<double>();
  };
  mg::autodiff::GradManager gm;
  gm.attach({x, w});
  {
    auto rec = gm.record();
    const mg::Tensor y = F::conv2d(x, w, b, o);
    BOOST_TEST((y.suggest_memory_format() == kCL));
    gm.backward(F::sum(F::mul(y, mix)));
  }
  for (const mg::Tensor& p : {x, w}) {
    const std::vector<double> g = p.grad().to_vector<double>();
    auto* d = static_cast<double*>(p.raw_data());
    int64_t k = 0;  // logical (row-major) index; the element lies at its strided offset
    for (int64_t i0 = 0; i0 < p.size(0); ++i0)
      for (int64_t i1 = 0; i1 < p.size(1); ++i1)
        for (int64_t i2 = 0; i2 < p.size(2); ++i2)
          for (int64_t i3 = 0; i3 < p.size(3); ++i3, ++k) {
            double& v = d[i0 * p.strides()[0] + i1 * p.strides()[1] + i2 * p.strides()[2] + i3 * p.strides()[3]];
            const double keep = v, eps = 1e-6;
            v = keep + eps;
            const double up = loss();
            v = keep - eps;
            const double down = loss();
            v = keep;
            const double fd = (up - down) / (2 * eps);
            BOOST_TEST(std::abs(g[k] - fd) <= 1e-7 * (1 + std::abs(fd)), "at " << k << ": " << g[k] << " vs " << fd);
          }
  }
}

// bfloat16 channels-last convolution against float32 contiguous: within
// bfloat16's rounding of inputs, weights and result (3 roundings of 2^-9,
// summed over 36 products: 2e-2 of the largest output).
BOOST_AUTO_TEST_CASE(conv2d_channels_last_bfloat16_against_float32) {
  mg::manual_seed(13);
  const mg::Tensor x = mg::uniform({2, 4, 9, 9});
  const mg::Tensor w = mg::uniform({6, 4, 3, 3});
  const mg::Tensor want = F::conv2d(x, w, mg::Tensor(), {.padding = 1});
  const mg::Tensor got = F::conv2d(x.to(mg::DType::bfloat16).contiguous(kCL), w.to(mg::DType::bfloat16),
                                   mg::Tensor(), {.padding = 1});
  BOOST_TEST(got.dtype() == mg::DType::bfloat16);
  BOOST_TEST((got.suggest_memory_format() == kCL));
  const std::vector<double> g = got.to_vector<double>(), r = want.to_vector<double>();
  double scale = 0, diff = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    scale = std::max(scale, std::abs(r[i]));
    diff = std::max(diff, std::abs(g[i] - r[i]));
  }
  BOOST_TEST(diff <= 2e-2 * scale, "max difference " << diff << " of " << scale);
}

// The state dict holds the logical NCHW order whatever the layout; loading
// into a channels-last module keeps its layout.
BOOST_AUTO_TEST_CASE(state_dict_round_trip_keeps_logical_order_and_format) {
  mg::manual_seed(14);
  Block ref;
  Block cl;
  take_converted(cl, ref);
  const mg::StateDict saved = cl.state_dict();
  const mg::StateDict want = ref.state_dict();
  for (const auto& [name, t] : saved) {
    BOOST_TEST(t.is_contiguous(), name);
    BOOST_TEST(t.to_vector<double>() == want.at(name).to_vector<double>(), boost::test_tools::per_element());
  }
  Block other;
  mg::amp::convert_module_format(other);
  other.load_state_dict(saved);
  BOOST_TEST((other.conv->weight().suggest_memory_format() == kCL));
  test_util::check_close(other.conv->weight(), ref.conv->weight(), 0.0);
  // And back: a contiguous module loads a channels-last module's dict.
  Block plain;
  plain.load_state_dict(saved);
  BOOST_TEST(plain.conv->weight().is_contiguous());
  test_util::check_close(plain.conv->weight(), ref.conv->weight(), 0.0);
}

// MegEngine's test_convert_module: every 4-d tensor of the module
// channels-last, shapes unchanged (MegEngine's batch-norm parameters are
// [1, C, 1, 1]; ours are [C] and stay as they are).
BOOST_AUTO_TEST_CASE(upstream_convert_module) {
  struct Inner : nn::Module {
    std::shared_ptr<nn::BatchNorm2d> bn = register_module("bn", nn::BatchNorm2d(4));
    mg::Tensor forward(const mg::Tensor& x) override { return (*bn)(x); }
  };
  struct MyModule : nn::Module {
    std::shared_ptr<Inner> i = register_module("i", Inner());
    std::shared_ptr<nn::Conv2d> conv = register_module("conv", nn::Conv2d(4, 4, 4, {.groups = 2}));
    std::shared_ptr<nn::BatchNorm2d> bn = register_module("bn", nn::BatchNorm2d(4));
    mg::Tensor param = register_parameter("param", mg::ones({1, 3, 1, 1}));
    mg::Tensor buff = register_buffer("buff", mg::ones({1, 3, 1, 1}));
    mg::Tensor forward(const mg::Tensor& x) override { return (*bn)((*i)(x)); }
  };
  MyModule m;
  const uint64_t id = m.conv->weight().id();
  const mg::StateDict before = m.state_dict();
  nn::Module& same = mg::amp::convert_module_format(m);
  BOOST_TEST(&same == static_cast<nn::Module*>(&m));
  for (const auto& [name, t] : m.named_parameters()) {
    BOOST_TEST(t.shape() == before.at(name).shape(), name);
    if (t.ndim() == 4) BOOST_TEST(t.is_contiguous(kCL), name);
  }
  for (const auto& [name, t] : m.named_buffers()) {
    BOOST_TEST(t.shape() == before.at(name).shape(), name);
    if (t.ndim() == 4) BOOST_TEST(t.is_contiguous(kCL), name);
  }
  BOOST_TEST(m.conv->weight().shape() == mg::Shape({4, 2, 4, 4}));
  BOOST_TEST((m.conv->weight().suggest_memory_format() == kCL));
  BOOST_TEST(m.conv->weight().id() == id);  // in place: the same tensor
  test_util::check_close(m.conv->weight(), before.at("conv.weight"), 0.0);
}

// MegEngine's test_format_remained: conv + bn + relu converted, trained
// under autocast with a GradScaler and SGD for 5 steps; every step's output
// (and the weight the optimizer updates) stays channels-last.
BOOST_AUTO_TEST_CASE(upstream_format_remained) {
  mg::manual_seed(15);
  nn::Sequential m(nn::Conv2d(3, 16, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(16), nn::ReLU());
  mg::amp::convert_module_format(m);
  mg::autodiff::GradManager gm;
  gm.attach(m.parameters());
  mg::optim::SGD opt(m.parameters(), {.lr = 0.01});
  mg::amp::GradScaler scaler;
  const mg::Tensor image = mg::amp::convert_tensor_format(mg::normal({1, 3, 32, 32}));
  const mg::Tensor label = mg::ones({1, 32, 32}, mg::DType::int64);
  const mg::Tensor weight = m.parameters()[0];
  for (int step = 0; step < 5; ++step) {
    mg::Tensor logits;
    {
      mg::amp::autocast scope(true);
      auto rec = gm.record();
      logits = m(image);
      scaler.backward(gm, F::cross_entropy(logits, label));
    }
    opt.step().clear_grad();
    BOOST_TEST((logits.suggest_memory_format() == kCL), "step " << step);
    BOOST_TEST((weight.suggest_memory_format() == kCL), "step " << step);
  }
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// ---- pooling on channels-last --------------------------------------------------
// max_pool2d, avg_pool2d and adaptive_avg_pool2d read a channels-last input
// as it lies and write channels-last results and gradients. The built-in
// walks (and the own 2 x 2 max kernel) do each element's arithmetic in the
// NCHW order, so they match the NCHW run bit for bit; oneDNN's NHWC and
// NCHW kernels are separate code (their bfloat16 backwards differ from
// each other by one bfloat16 unit where windows overlap) and are held to one
// rounding of the dtype (check_close's tol * (1 + |want|): float32 4e-7,
// float16 1e-3, bfloat16 8e-3 = 2^-7).

using PoolFn = std::function<mg::Tensor(const mg::Tensor&)>;

// The geometries: 2 x 2 / stride 2 (the own kernel), padding, stride other
// than the kernel, overlapping windows, adaptive windows even (oneDNN's avg
// pool) and uneven (the walk), and the global pool.
std::vector<std::pair<const char*, PoolFn>> pool_cases() {
  return {
      {"max 2x2", [](const mg::Tensor& t) { return F::max_pool2d(t, {.kernel_size = 2, .stride = 0, .padding = 0}); }},
      {"max 3x3 s2 p1",
       [](const mg::Tensor& t) { return F::max_pool2d(t, {.kernel_size = 3, .stride = 2, .padding = 1}); }},
      {"max (3,2) s(1,3) p(1,1)",
       [](const mg::Tensor& t) { return F::max_pool2d(t, {.kernel_size = {3, 2}, .stride = {1, 3}, .padding = 1}); }},
      {"avg 3x3 s2 p1",
       [](const mg::Tensor& t) { return F::avg_pool2d(t, {.kernel_size = 3, .stride = 2, .padding = 1}); }},
      {"avg (2,3) s(3,1) p(1,1)",
       [](const mg::Tensor& t) { return F::avg_pool2d(t, {.kernel_size = {2, 3}, .stride = {3, 1}, .padding = 1}); }},
      {"adaptive (3,4)", [](const mg::Tensor& t) { return F::adaptive_avg_pool2d(t, {3, 4}); }},
      {"adaptive (4,5)", [](const mg::Tensor& t) { return F::adaptive_avg_pool2d(t, {4, 5}); }},
      {"adaptive (1,1)", [](const mg::Tensor& t) { return F::adaptive_avg_pool2d(t, {1, 1}); }},
  };
}

struct PoolRun {
  mg::Tensor y, gx, hv;  // the result, the gradient, a Hessian-vector product
};

// y = op(x), the gradient of sum(op(x)^2 * c), then (create_graph) the
// gradient of sum(g * v): the recorded backward's own backward.
PoolRun run_pool(const PoolFn& op, const mg::Tensor& x_in, const mg::Tensor& c, const mg::Tensor& v) {
  mg::Tensor x = x_in.detach();
  mg::autodiff::GradManager gm;
  gm.attach(x);
  PoolRun r;
  {
    auto rec = gm.record();
    r.y = op(x);
    gm.backward(F::sum(F::mul(F::mul(r.y, r.y), c)), {}, {.create_graph = true});
    r.gx = x.grad();
    x.set_grad({});
    gm.backward(F::sum(F::mul(r.gx, v)));
  }
  r.hv = x.grad();
  return r;
}

void check_pool_match(const mg::Tensor& got, const mg::Tensor& want, double tol) {
  if (tol == 0) {
    BOOST_TEST(got.to_vector<double>() == want.to_vector<double>(), boost::test_tools::per_element());
  } else {
    test_util::check_close(got, want, tol);
  }
}

// True when t lies channels-last (for [N, C, 1, 1], both layouts are one).
bool lies_channels_last(const mg::Tensor& t) { return t.is_contiguous(kCL); }

}  // namespace

BOOST_AUTO_TEST_SUITE(memory_format_pooling)

BOOST_AUTO_TEST_CASE(pooling_channels_last_matches_nchw) {
  namespace dnn = mg::backend::onednn;
  std::vector<dnn::Mode> modes{dnn::Mode::never};
  if (dnn::built()) modes.push_back(dnn::Mode::always);
  for (dnn::Mode mode : modes)
    for (mg::DType dt : {mg::DType::float32, mg::DType::bfloat16, mg::DType::float16, mg::DType::float64})
      for (int64_t channels : {5, 16}) {
        dnn::ModeScope scope(mode);
        mg::manual_seed(21);
        const mg::Tensor x = mg::normal({2, channels, 9, 11}, 0, 1, dt);
        const mg::Tensor xcl = x.contiguous(kCL);
        for (const auto& entry : pool_cases()) {
          const PoolFn& op = entry.second;  // named: clang 14 cannot capture a structured binding
          BOOST_TEST_CONTEXT(entry.first << " " << mg::to_string(dt) << " C " << channels << " oneDNN "
                                         << (mode == dnn::Mode::always)) {
            const mg::Shape ys = op(x).shape();
            const mg::Tensor c = mg::uniform(ys, 0.5, 1.5, dt), v = mg::uniform(x.shape(), -1, 1, dt);
            const PoolRun want = run_pool(op, x, c, v), got = run_pool(op, xcl, c.contiguous(kCL), v);
            BOOST_TEST(lies_channels_last(got.y));
            BOOST_TEST((got.gx.suggest_memory_format() == kCL));
            BOOST_TEST((got.hv.suggest_memory_format() == kCL));
            BOOST_TEST((want.y.is_contiguous() && want.gx.is_contiguous()));
            // oneDNN runs float32 and bfloat16 (float16 by way of float32);
            // the recorded max-pool backward always takes the walks.
            const bool dnn_path = mode == dnn::Mode::always && dt != mg::DType::float64;
            const double tol = !dnn_path ? 0 : dt == mg::DType::bfloat16 ? 8e-3 : dt == mg::DType::float16 ? 1e-3 : 4e-7;
            check_pool_match(got.y, want.y, tol);
            check_pool_match(got.gx, want.gx, tol);
            check_pool_match(got.hv, want.hv, tol);
          }
        }
      }
}

// A channels-last pooling makes no NCHW copy: its forward allocates only
// the result and the workspace (at most 4 bytes per output), where an NCHW
// round trip copies the whole input first (and the result after).
BOOST_AUTO_TEST_CASE(pooling_channels_last_makes_no_layout_copy) {
  namespace dnn = mg::backend::onednn;
  std::vector<dnn::Mode> modes{dnn::Mode::never, dnn::Mode::automatic};
  for (dnn::Mode mode : modes)
    for (mg::DType dt : {mg::DType::float32, mg::DType::bfloat16})
      for (const auto& entry : pool_cases()) {
        const PoolFn& op = entry.second;
        BOOST_TEST_CONTEXT(entry.first << " " << mg::to_string(dt) << " mode " << int(mode)) {
          dnn::ModeScope scope(mode);
          const mg::Tensor x = mg::normal({4, 6, 32, 32}, 0, 1, dt).contiguous(kCL);
          const mg::Shape ys = op(x).shape();
          const int64_t y_bytes = ys.numel() * mg::element_size(dt);
          const int64_t x_bytes = x.numel() * mg::element_size(dt);
          mg::reset_peak_allocated_bytes();
          const int64_t before = mg::allocated_bytes();
          const mg::Tensor y = op(x);
          const int64_t grew = mg::peak_allocated_bytes() - before;
          BOOST_TEST(lies_channels_last(y));
          // y, and a workspace of at most 4 bytes per output; a copy of x
          // (which the bound leaves no room for) would exceed it.
          const int64_t bound = y_bytes + 4 * ys.numel() + 4096;
          BOOST_TEST_REQUIRE(x_bytes > bound - y_bytes);
          BOOST_TEST(grew <= bound, "allocated " << grew << " bytes, y " << y_bytes << ", x " << x_bytes);
        }
      }
}

// Bad input on a channels-last tensor: the same typed errors, naming the op
// and the shapes, and the input unchanged.
BOOST_AUTO_TEST_CASE(pooling_channels_last_bad_input) {
  const mg::Tensor x = mg::normal({1, 3, 4, 4}).contiguous(kCL);
  const std::vector<double> before = x.to_vector<double>();
  test_util::check_error<mg::ShapeError>(
      [&] { F::max_pool2d(x, {.kernel_size = 7, .stride = 1, .padding = 0}); }, {"max_pool2d", "[1, 3, 4, 4]"});
  test_util::check_error<mg::ShapeError>(
      [&] { F::avg_pool2d(x, {.kernel_size = 2, .stride = 1, .padding = 2}); }, {"avg_pool2d", "[1, 3, 4, 4]"});
  test_util::check_error<mg::ShapeError>([&] { F::adaptive_avg_pool2d(x, {0, 2}); },
                                         {"adaptive_avg_pool2d", "[1, 3, 4, 4]"});
  BOOST_TEST(x.to_vector<double>() == before, boost::test_tools::per_element());
  BOOST_TEST(x.is_contiguous(kCL));
}

BOOST_AUTO_TEST_SUITE_END()
