// The misuse table: every row is a wrong call into mixgrad, the exception
// type it must throw (exactly that type, not a base class), the substrings
// its message must contain (the function, the shapes and dtypes involved),
// and the promise that nothing changed: a snapshot of a trained fixture
// (parameters, gradients, optimizer and scaler state, recording state, amp
// settings) is bitwise the same before and after.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <typeindex>
#include <vector>

#include "misuse/misuse_fixture.hpp"

namespace mg = mixgrad;
using mg::DType;
using misuse::Fixture;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Row {
  std::string name;
  std::function<void(Fixture&)> misuse;
  std::type_index type;
  std::string type_name;
  std::vector<std::string> needles;
  std::function<void(Fixture&)> setup;  // runs before the snapshot; may be empty
};

template <class E>
const char* name_of();
template <> const char* name_of<mg::ShapeError>() { return "ShapeError"; }
template <> const char* name_of<mg::DTypeError>() { return "DTypeError"; }
template <> const char* name_of<mg::DeviceError>() { return "DeviceError"; }
template <> const char* name_of<mg::StateError>() { return "StateError"; }
template <> const char* name_of<mg::ValueError>() { return "ValueError"; }
template <> const char* name_of<mg::IOError>() { return "IOError"; }

template <class E>
Row row(std::string name, std::function<void(Fixture&)> misuse, std::vector<std::string> needles,
        std::function<void(Fixture&)> setup = {}) {
  return Row{std::move(name), std::move(misuse), std::type_index(typeid(E)), name_of<E>(), std::move(needles),
             std::move(setup)};
}

mg::Tensor f32(const mg::Shape& s) { return mg::zeros(s); }
mg::Tensor i64(std::initializer_list<int64_t> v) { return mg::tensor<int64_t>(v, {static_cast<int64_t>(v.size())}); }

// A dataset of 4 samples of 2 features.
mg::data::TensorDataset small_dataset() { return {mg::zeros({4, 2}), mg::tensor<int64_t>({0, 1, 0, 1}, {4})}; }

std::vector<Row> creation_and_tensor_rows() {
  using mg::ShapeError, mg::DTypeError, mg::ValueError, mg::DeviceError, mg::StateError;
  return {
      row<ShapeError>("tensor: value count != numel", [](Fixture&) { (void)mg::tensor<float>({1, 2, 3}, {2, 2}); },
                      {"tensor", "[2, 2]", "3 values"}),
      row<ShapeError>("empty: negative extent", [](Fixture&) { (void)mg::zeros({2, -1}); }, {"[2, -1]"}),
      row<ValueError>("arange: zero step", [](Fixture&) { (void)mg::arange(0.0, 1.0, 0.0); }, {"arange", "step=0"}),
      row<ValueError>("arange: NaN end", [](Fixture&) { (void)mg::arange(0.0, kNaN); }, {"arange", "nan"}),
      row<ValueError>("arange: infinite step", [](Fixture&) { (void)mg::arange(0.0, 1.0, kInf); }, {"arange", "inf"}),
      row<ValueError>("arange: 1e30 elements", [](Fixture&) { (void)mg::arange(0.0, 1e30); },
                      {"arange", "2^53", "float32"}),
      row<ValueError>("arange: values beyond int32", [](Fixture&) { (void)mg::arange(0.0, 3e9, 1e8, DType::int32); },
                      {"arange", "int32"}),
      row<ValueError>("uniform: low > high", [](Fixture&) { (void)mg::uniform({2, 3}, 1.0, 0.0); },
                      {"uniform", "[2, 3]"}),
      row<ValueError>("uniform: infinite bound", [](Fixture&) { (void)mg::uniform({2, 3}, 0.0, kInf); },
                      {"uniform", "inf"}),
      row<ValueError>("normal: negative std", [](Fixture&) { (void)mg::normal({2, 3}, 0.0, -1.0); },
                      {"normal", "[2, 3]", "std"}),
      row<DTypeError>("normal: integer dtype", [](Fixture&) { (void)mg::normal({2, 3}, 0.0, 1.0, DType::int32); },
                      {"normal", "int32"}),
      row<ValueError>("set_num_threads(0)", [](Fixture&) { mg::set_num_threads(0); }, {"set_num_threads", "0"}),
      row<ShapeError>("item of several elements", [](Fixture& f) { (void)f.a.item<float>(); }, {"item", "[2, 3]"}),
      row<DTypeError>("data<T> of the wrong type", [](Fixture& f) { (void)f.a.data<double>(); },
                      {"data", "float32", "float64"}),
      row<ShapeError>("at with too few indices", [](Fixture& f) { (void)f.a.at<float>({0}); }, {"at", "[2, 3]"}),
      row<ShapeError>("at out of range", [](Fixture& f) { (void)f.a.at<float>({0, 3}); }, {"at", "[2, 3]"}),
      row<ShapeError>("reshape to another size", [](Fixture& f) { (void)f.a.reshape({4}); },
                      {"reshape", "float32[2, 3]", "[4]"}),
      row<ShapeError>("reshape with two -1", [](Fixture& f) { (void)f.a.reshape({-1, -1}); }, {"reshape", "[-1, -1]"}),
      row<ShapeError>("narrow past the end", [](Fixture& f) { (void)f.a.narrow(1, 2, 2); },
                      {"narrow", "float32[2, 3]"}),
      row<DeviceError>("to a CUDA device that is not there", [](Fixture& f) { (void)f.a.to(mg::Device::cuda(7)); },
                       {"Tensor::to", "float32[2, 3]", "cuda"}),
      row<StateError>("astype of an undefined tensor", [](Fixture&) { (void)mg::F::astype(mg::Tensor(), DType::float16); },
                      {"astype", "undefined"}),
  };
}

std::vector<Row> elementwise_and_reduction_rows() {
  using mg::ShapeError, mg::DTypeError, mg::ValueError, mg::StateError;
  return {
      row<ShapeError>("add: shapes do not broadcast", [](Fixture& f) { (void)(f.a + f.b); },
                      {"add", "float32[2, 3]", "float32[4, 5]"}),
      row<ShapeError>("mul: shapes do not broadcast", [](Fixture& f) { (void)mg::F::mul(f.a, f32({3, 2})); },
                      {"mul", "[2, 3]", "[3, 2]"}),
      row<StateError>("sub: undefined operand", [](Fixture& f) { (void)(f.a - mg::Tensor()); }, {"sub", "undefined"}),
      row<DTypeError>("where: float condition", [](Fixture& f) { (void)mg::F::where(f.a, f.a, f.a); },
                      {"where", "float32[2, 3]", "bool"}),
      row<ShapeError>("where: condition does not broadcast",
                      [](Fixture& f) { (void)mg::F::where(mg::zeros({4}, DType::bool_), f.a, f.a); },
                      {"where", "[4]", "[2, 3]"}),
      row<DTypeError>("exp of int32", [](Fixture& f) { (void)mg::F::exp(f.ints); }, {"exp", "int32"}),
      row<ValueError>("clamp: lo > hi", [](Fixture& f) { (void)mg::F::clamp(f.a, 1.0, 0.0); },
                      {"clamp", "float32[2, 3]"}),
      row<ValueError>("softplus: beta 0", [](Fixture& f) { (void)mg::F::softplus(f.a, 0.0); },
                      {"softplus", "beta", "float32[2, 3]"}),
      row<DTypeError>("mish of int32", [](Fixture& f) { (void)mg::F::mish(f.ints); }, {"mish", "int32"}),
      row<ShapeError>("softmax: axis out of range", [](Fixture& f) { (void)mg::F::softmax(f.a, 2); },
                      {"softmax", "axis 2"}),
      row<DTypeError>("softmax of int32", [](Fixture& f) { (void)mg::F::softmax(f.ints); }, {"softmax", "int32"}),
      row<ShapeError>("sum: axis out of range", [](Fixture& f) { (void)mg::F::sum(f.a, 5); }, {"sum", "axis 5"}),
      row<ShapeError>("mean: repeated axis", [](Fixture& f) { (void)mg::F::mean(f.a, {0, 0}); }, {"mean"}),
      row<ShapeError>("argmax: axis out of range", [](Fixture& f) { (void)mg::F::argmax(f.a, 3); },
                      {"argmax", "axis 3"}),
      row<ShapeError>("sum_to an incompatible shape", [](Fixture& f) { (void)mg::F::sum_to(f.a, {4}); },
                      {"sum_to", "[2, 3]", "[4]"}),
  };
}

std::vector<Row> linalg_and_conv_rows() {
  using mg::ShapeError, mg::DTypeError, mg::ValueError;
  return {
      row<ShapeError>("matmul: inner dims differ", [](Fixture& f) { (void)mg::F::matmul(f.a, f.a); },
                      {"matmul", "float32[2, 3]"}),
      row<ShapeError>("matmul of a 0-d tensor", [](Fixture& f) { (void)mg::F::matmul(mg::scalar(1.0), f.a); },
                      {"matmul", "float32[]", "float32[2, 3]"}),
      row<DTypeError>("matmul of int32", [](Fixture& f) { (void)mg::F::matmul(f.ints, mg::zeros({3, 2}, DType::int32)); },
                      {"matmul", "int32"}),
      row<DTypeError>("matmul: float32 x float64",
                      [](Fixture& f) { (void)mg::F::matmul(f.a, mg::zeros({3, 2}, DType::float64)); },
                      {"matmul", "float32[2, 3]", "float64[3, 2]"}),
      row<ShapeError>("linear: weight does not fit", [](Fixture& f) { (void)mg::F::linear(f.a, f.b); },
                      {"linear", "float32[2, 3]", "float32[4, 5]"}),
      row<ShapeError>("linear: bias does not fit",
                      [](Fixture& f) { (void)mg::F::linear(f.a, f32({4, 3}), f32({5})); }, {"linear", "[5]", "[4, 3]"}),
      row<ShapeError>("Linear module: wrong in_features", [](Fixture& f) { (void)f.net(f32({2, 5})); },
                      {"Linear", "[2, 5]"}),
      row<ValueError>("Linear(0, 3)", [](Fixture&) { (void)mg::nn::Linear(0, 3); }, {"Linear", "0"}),
      row<ShapeError>("conv2d: channels differ",
                      [](Fixture&) { (void)mg::F::conv2d(f32({1, 2, 5, 5}), f32({3, 1, 3, 3})); },
                      {"conv2d", "[1, 2, 5, 5]", "[3, 1, 3, 3]"}),
      row<ShapeError>("conv2d of a 2-d input", [](Fixture& f) { (void)mg::F::conv2d(f.a, f32({3, 1, 3, 3})); },
                      {"conv2d", "float32[2, 3]"}),
      row<ShapeError>("conv2d: stride 0",
                      [](Fixture&) { (void)mg::F::conv2d(f32({1, 1, 5, 5}), f32({1, 1, 3, 3}), {}, {.stride = 0}); },
                      {"conv2d", "stride", "[1, 1, 5, 5]"}),
      row<ShapeError>("conv2d: kernel larger than input",
                      [](Fixture&) { (void)mg::F::conv2d(f32({1, 1, 2, 2}), f32({1, 1, 3, 3})); },
                      {"conv2d", "[1, 1, 2, 2]", "[1, 1, 3, 3]"}),
      row<DTypeError>("conv2d: float64 weight on float32 input",
                      [](Fixture&) { (void)mg::F::conv2d(f32({1, 1, 5, 5}), mg::zeros({1, 1, 3, 3}, DType::float64)); },
                      {"conv2d", "float32[1, 1, 5, 5]", "float64[1, 1, 3, 3]"}),
      row<ValueError>("Conv2d(0, 1, 3)", [](Fixture&) { (void)mg::nn::Conv2d(0, 1, 3); }, {"Conv2d"}),
      row<ShapeError>("max_pool2d: kernel 0", [](Fixture& f) { (void)mg::F::max_pool2d(f.img, {.kernel_size = 0}); },
                      {"max_pool2d", "float32[2, 2, 3, 3]"}),
      row<ShapeError>("max_pool2d of a 2-d input", [](Fixture& f) { (void)mg::F::max_pool2d(f.a, {.kernel_size = 2}); },
                      {"max_pool2d", "float32[2, 3]"}),
      row<ShapeError>("avg_pool2d: kernel larger than input",
                      [](Fixture& f) { (void)mg::F::avg_pool2d(f.img, {.kernel_size = 4}); },
                      {"avg_pool2d", "[2, 2, 3, 3]"}),
      row<ShapeError>("adaptive_avg_pool2d of a 0x0 image",
                      [](Fixture&) { (void)mg::F::adaptive_avg_pool2d(f32({1, 1, 0, 0}), 1); },
                      {"adaptive_avg_pool2d", "float32[1, 1, 0, 0]"}),
      row<ShapeError>("adaptive_avg_pool2d to size 0",
                      [](Fixture& f) { (void)mg::F::adaptive_avg_pool2d(f.img, 0); },
                      {"adaptive_avg_pool2d", "[2, 2, 3, 3]"}),
  };
}

std::vector<Row> normalization_and_loss_rows() {
  using mg::ShapeError, mg::DTypeError, mg::ValueError, mg::StateError;
  auto bn_call = [](const mg::F::BatchNormOptions& o) {
    return [o](Fixture& f) {
      (void)mg::F::batch_norm(f.img, f.bn.named_buffers()[0].second, f.bn.named_buffers()[1].second, {}, {}, o);
    };
  };
  return {
      row<ValueError>("batch_norm: NaN momentum", bn_call({.training = true, .momentum = kNaN}),
                      {"batch_norm", "momentum", "nan", "float32[2, 2, 3, 3]"}),
      row<ValueError>("batch_norm: momentum 2", bn_call({.training = true, .momentum = 2.0}),
                      {"batch_norm", "momentum", "2"}),
      row<ValueError>("batch_norm: negative eps", bn_call({.training = true, .eps = -1.0}), {"batch_norm", "eps"}),
      row<ValueError>("batch_norm: NaN eps (eval)", bn_call({.training = false, .eps = kNaN}),
                      {"batch_norm", "eps", "nan"}),
      row<ShapeError>("batch_norm: running_mean of another C",
                      [](Fixture& f) { (void)mg::F::batch_norm(f.img, f32({3}), f32({3}), {}, {}, {.training = true}); },
                      {"batch_norm", "running_mean", "[3]", "[2, 2, 3, 3]"}),
      row<ShapeError>("batch_norm: one value per channel in training",
                      [](Fixture& f) {
                        (void)mg::F::batch_norm(f32({1, 2, 1, 1}), f.bn.named_buffers()[0].second,
                                                f.bn.named_buffers()[1].second, {}, {}, {.training = true});
                      },
                      {"batch_norm", "[1, 2, 1, 1]"}),
      row<StateError>("batch_norm: eval without running stats",
                      [](Fixture& f) { (void)mg::F::batch_norm(f.img, {}, {}, {}, {}, {.training = false}); },
                      {"batch_norm", "running_mean"}),
      row<ShapeError>("BatchNorm2d: wrong channel count", [](Fixture& f) { (void)f.bn(f32({2, 3, 2, 2})); },
                      {"BatchNorm2d", "[2, 3, 2, 2]"}),
      row<ValueError>("BatchNorm2d: momentum 2", [](Fixture&) { (void)mg::nn::BatchNorm2d(2, {.momentum = 2.0}); },
                      {"BatchNorm2d", "momentum"}),
      row<ShapeError>("layer_norm: shape not trailing", [](Fixture& f) { (void)mg::F::layer_norm(f.a, {4}); },
                      {"layer_norm", "[4]", "float32[2, 3]"}),
      row<ValueError>("layer_norm: NaN eps", [](Fixture& f) { (void)mg::F::layer_norm(f.a, {3}, {}, {}, kNaN); },
                      {"layer_norm", "eps", "float32[2, 3]"}),
      row<ShapeError>("layer_norm: weight shape", [](Fixture& f) { (void)mg::F::layer_norm(f.a, {3}, f32({4})); },
                      {"layer_norm", "weight", "[4]", "[3]"}),
      row<ValueError>("cross_entropy: label == classes",
                      [](Fixture& f) { (void)mg::F::cross_entropy(f.a, i64({0, 3})); },
                      {"cross_entropy", "label 3", "int64[2]", "float32[2, 3]", "3 classes"}),
      row<ValueError>("cross_entropy: negative label",
                      [](Fixture& f) { (void)mg::F::cross_entropy(f.a, i64({-1, 0})); }, {"cross_entropy", "-1"}),
      row<DTypeError>("cross_entropy: float labels", [](Fixture& f) { (void)mg::F::cross_entropy(f.a, f32({2})); },
                      {"cross_entropy", "float32[2]"}),
      row<ShapeError>("cross_entropy: labels shape", [](Fixture& f) { (void)mg::F::cross_entropy(f.a, i64({0, 1, 2})); },
                      {"cross_entropy", "int64[3]", "float32[2, 3]"}),
      row<DTypeError>("cross_entropy: int logits", [](Fixture& f) { (void)mg::F::cross_entropy(f.ints, f.labels); },
                      {"cross_entropy", "int32[2, 3]"}),
      row<ValueError>("cross_entropy: label_smoothing 1.5",
                      [](Fixture& f) { (void)mg::F::cross_entropy(f.a, f.labels, {.label_smoothing = 1.5}); },
                      {"cross_entropy", "label_smoothing", "float32[2, 3]"}),
      row<ValueError>("nll_loss: label out of range", [](Fixture& f) { (void)mg::F::nll_loss(f.a, i64({0, 7})); },
                      {"nll_loss", "label 7", "3 classes"}),
      row<ShapeError>("mse_loss: shapes differ", [](Fixture& f) { (void)mg::F::mse_loss(f.a, f32({3, 2})); },
                      {"mse_loss", "float32[2, 3]", "float32[3, 2]"}),
      row<DTypeError>("mse_loss: int32 target", [](Fixture& f) { (void)mg::F::mse_loss(f.a, f.ints); },
                      {"mse_loss", "int32[2, 3]"}),
      row<ShapeError>("binary_cross_entropy_with_logits: shapes differ",
                      [](Fixture& f) { (void)mg::F::binary_cross_entropy_with_logits(f.a, f32({2})); },
                      {"binary_cross_entropy_with_logits", "[2, 3]", "[2]"}),
      row<ValueError>("dropout: p = 1", [](Fixture& f) { (void)mg::F::dropout(f.a, 1.0); },
                      {"dropout", "float32[2, 3]"}),
      row<ValueError>("dropout: p = NaN", [](Fixture& f) { (void)mg::F::dropout(f.a, kNaN); }, {"dropout", "nan"}),
      row<DTypeError>("dropout of int32", [](Fixture& f) { (void)mg::F::dropout(f.ints, 0.5); }, {"dropout", "int32"}),
      row<ValueError>("Dropout(1.5)", [](Fixture&) { (void)mg::nn::Dropout(1.5); }, {"Dropout", "1.5"}),
  };
}

std::vector<Row> shape_op_rows() {
  using mg::ShapeError, mg::StateError;
  return {
      row<ShapeError>("concat: shapes differ", [](Fixture& f) { (void)mg::F::concat({f.a, f.b}, 0); },
                      {"concat", "float32[2, 3]", "float32[4, 5]"}),
      row<ShapeError>("concat of nothing", [](Fixture&) { (void)mg::F::concat({}); }, {"concat", "no tensors"}),
      row<StateError>("concat: undefined input", [](Fixture& f) { (void)mg::F::concat({f.a, mg::Tensor()}); },
                      {"concat", "undefined"}),
      row<ShapeError>("stack: shapes differ", [](Fixture& f) { (void)mg::F::stack({f.a, f32({3, 2})}); },
                      {"stack", "[2, 3]", "[3, 2]"}),
      row<ShapeError>("transpose: dim out of range", [](Fixture& f) { (void)mg::F::transpose(f.a, 0, 2); },
                      {"transpose", "axis 2"}),
      row<ShapeError>("permute: repeated dim", [](Fixture& f) { (void)mg::F::permute(f.a, {0, 0}); },
                      {"permute", "float32[2, 3]"}),
      row<ShapeError>("permute: wrong length", [](Fixture& f) { (void)mg::F::permute(f.a, {0}); },
                      {"permute", "float32[2, 3]"}),
      row<ShapeError>("unsqueeze: dim out of range", [](Fixture& f) { (void)mg::F::unsqueeze(f.a, 4); },
                      {"unsqueeze", "axis 4"}),
      row<ShapeError>("squeeze: dim out of range", [](Fixture& f) { (void)mg::F::squeeze(f.a, 2); },
                      {"squeeze", "axis 2"}),
      row<ShapeError>("broadcast_to an incompatible shape", [](Fixture& f) { (void)mg::F::broadcast_to(f.a, {4, 3}); },
                      {"broadcast_to", "[2, 3]", "[4, 3]"}),
      row<ShapeError>("flatten: start after end", [](Fixture& f) { (void)mg::F::flatten(f.a, 1, 0); },
                      {"flatten", "start_dim"}),
  };
}

std::vector<Row> autodiff_and_amp_rows() {
  using mg::ShapeError, mg::DTypeError, mg::ValueError, mg::StateError;
  auto record_and = [](std::function<void(Fixture&, const mg::Tensor&)> then) {
    return [then](Fixture& f) {
      auto rec = f.gm.record();
      then(f, f.net(f.x));
    };
  };
  return {
      row<StateError>("backward without record",
                      [](Fixture& f) { f.gm.backward(mg::F::cross_entropy(f.net(f.x), f.labels)); },
                      {"GradManager::backward", "record"}),
      row<StateError>("record twice", [](Fixture& f) {
        auto rec = f.gm.record();
        auto again = f.gm.record();
      }, {"GradManager::record", "already"}),
      row<DTypeError>("attach an int32 tensor", [](Fixture& f) { f.gm.attach(f.ints); },
                      {"GradManager::attach", "int32", "[2, 3]"}),
      row<StateError>("attach an undefined tensor", [](Fixture& f) { f.gm.attach(mg::Tensor()); },
                      {"GradManager::attach", "undefined"}),
      row<ShapeError>("backward with dy of the wrong shape",
                      record_and([](Fixture& f, const mg::Tensor& y) { f.gm.backward(y, f32({3})); }),
                      {"GradManager::backward", "[3]", "[2, 2]"}),
      row<ShapeError>("backward with more dys than ys",
                      record_and([](Fixture& f, const mg::Tensor& y) {
                        f.gm.backward(std::vector<mg::Tensor>{y}, {mg::ones_like(y), mg::ones_like(y)});
                      }),
                      {"GradManager::backward", "1 outputs", "2"}),
      row<DTypeError>("backward from an int64 output",
                      record_and([](Fixture& f, const mg::Tensor& y) { f.gm.backward(mg::F::argmax(y, 1)); }),
                      {"GradManager::backward", "int64"}),
      row<DTypeError>("amp::low_prec_dtype = int32", [](Fixture&) { mg::amp::low_prec_dtype = DType::int32; },
                      {"amp::low_prec_dtype", "int32", "float16", "bfloat16"}),
      row<DTypeError>("amp::low_prec_dtype = float32", [](Fixture&) { mg::amp::low_prec_dtype = DType::float32; },
                      {"amp::low_prec_dtype", "float32"}),
      row<DTypeError>("amp::high_prec_dtype = bfloat16", [](Fixture&) { mg::amp::high_prec_dtype = DType::bfloat16; },
                      {"amp::high_prec_dtype", "bfloat16", "float32", "float64"}),
      row<DTypeError>("autocast scope with float32 as low precision",
                      [](Fixture&) { mg::amp::autocast scope(true, DType::float32); },
                      {"autocast", "low_prec_dtype", "float32"}),
      row<DTypeError>("autocast scope with float16 as high precision",
                      [](Fixture&) { mg::amp::autocast scope(true, std::nullopt, DType::float16); },
                      {"autocast", "high_prec_dtype", "float16"}),
      row<ValueError>("GradScaler: init_scale 0", [](Fixture&) { mg::amp::GradScaler s({.init_scale = 0.0}); },
                      {"GradScaler", "init_scale"}),
      row<ValueError>("GradScaler: growth_factor 0.5", [](Fixture&) { mg::amp::GradScaler s(16.0, 0.5); },
                      {"GradScaler", "growth_factor", "0.5"}),
      row<ValueError>("GradScaler: backoff_factor 1.5", [](Fixture&) { mg::amp::GradScaler s(16.0, 2.0, 1.5); },
                      {"GradScaler", "backoff_factor", "1.5"}),
      row<ValueError>("GradScaler: negative growth_interval",
                      [](Fixture&) { mg::amp::GradScaler s(16.0, 2.0, 0.5, -1); }, {"GradScaler", "growth_interval"}),
      row<ValueError>("GradScaler::update(NaN)", [](Fixture& f) { f.scaler.update(kNaN); },
                      {"GradScaler::update", "new_scale", "nan"}),
      row<ValueError>("GradScaler::update(-1)", [](Fixture& f) { f.scaler.update(-1.0); },
                      {"GradScaler::update", "new_scale", "-1"}),
      row<StateError>("GradScaler: unscale twice in a step",
                      [](Fixture& f) { f.scaler.unscale(f.net.parameters()); },
                      {"GradScaler::unscale", "already unscaled in this step", "float32[3, 4]"},
                      [](Fixture& f) {
                        f.opt->clear_grad();
                        {
                          auto rec = f.gm.record();
                          f.gm.backward(f.scaler.scale(mg::F::cross_entropy(f.net(f.x), f.labels)));
                        }
                        f.scaler.unscale(f.net.parameters());
                      }),
      // The fixture's gradients were unscaled by the last step's automatic gear.
      row<StateError>("GradScaler: unscale of gradients an earlier step unscaled",
                      [](Fixture& f) { f.scaler.unscale(f.net.parameters()); },
                      {"GradScaler::unscale", "float32[3, 4]", "already unscaled", "earlier step", "clear_grad"}),
      row<StateError>("GradScaler::backward into gradients an earlier step unscaled",
                      record_and([](Fixture& f, const mg::Tensor& y) {
                        f.scaler.backward(f.gm, mg::F::cross_entropy(y, f.labels));
                      }),
                      {"GradScaler::backward", "float32[3, 4]", "already unscaled", "clear_grad"}),
      row<StateError>("GradScaler::step on gradients of a dy scaled by hand",
                      [](Fixture& f) { f.scaler.step(*f.opt); },
                      {"GradScaler::step", "float32[3, 4]", "dy", "scaler.unscale(...)", "scaler.scale(loss)"},
                      [](Fixture& f) {
                        f.opt->clear_grad();
                        auto rec = f.gm.record();
                        auto loss = mg::F::cross_entropy(f.net(f.x), f.labels);
                        f.gm.backward(loss, mg::full_like(loss, f.scaler.scale_factor()));
                      }),
      row<StateError>("GradScaler::step on gradients of an unscaled loss",
                      [](Fixture& f) { f.scaler.step(*f.opt); },
                      {"GradScaler::step", "float32[3, 4]", "did not come through this scaler",
                       "scaler.scale(loss)"},
                      [](Fixture& f) {
                        f.opt->clear_grad();
                        auto rec = f.gm.record();
                        f.gm.backward(mg::F::cross_entropy(f.net(f.x), f.labels));
                      }),
      row<StateError>("GradScaler::step on gradients scaled before update()",
                      [](Fixture& f) { f.scaler.step(*f.opt); },
                      {"GradScaler::step", "float32[3, 4]", "before this scaler's last update()"},
                      [](Fixture& f) {
                        f.opt->clear_grad();
                        {
                          auto rec = f.gm.record();
                          f.gm.backward(f.scaler.scale(mg::F::cross_entropy(f.net(f.x), f.labels)));
                        }
                        f.scaler.update();
                      }),
      row<StateError>("GradScaler::step on a scaled loss's gradients added to an earlier step's",
                      [](Fixture& f) { f.scaler.step(*f.opt); },
                      {"GradScaler::step", "float32[3, 4]", "sums values scaled", "clear_grad"},
                      [](Fixture& f) {
                        auto rec = f.gm.record();
                        f.gm.backward(f.scaler.scale(mg::F::cross_entropy(f.net(f.x), f.labels)));
                      }),
      row<StateError>("optimizer step on a scaled loss's gradients added to an earlier step's",
                      [](Fixture& f) { f.opt->step(); },
                      {"Adam::step", "parameter 0", "float32[3, 4]", "scaled", "clear_grad"},
                      [](Fixture& f) {
                        auto rec = f.gm.record();
                        f.gm.backward(f.scaler.scale(mg::F::cross_entropy(f.net(f.x), f.labels)));
                      }),
      row<DTypeError>("GradScaler::scale of an int64 tensor", [](Fixture& f) { (void)f.scaler.scale(f.labels); },
                      {"GradScaler::scale", "int64[2]", "floating"}),
      row<StateError>("optimizer step on gradients GradScaler::backward scaled and nothing unscaled",
                      [](Fixture& f) { f.opt->step(); },
                      {"Adam::step", "parameter 0", "float32[3, 4]", "scaled", "scaler.step(opt)"},
                      [](Fixture& f) {
                        f.opt->clear_grad();
                        auto rec = f.gm.record();
                        f.scaler.backward(f.gm, mg::F::cross_entropy(f.net(f.x), f.labels), mg::Tensor(),
                            {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
                      }),
      row<ValueError>("GradScaler::load_state_dict: missing key",
                      [](Fixture& f) {
                        mg::StateDict sd;
                        sd.insert("scale_factor", mg::scalar(8.0, mg::DType::float64));
                        f.scaler.load_state_dict(sd);
                      },
                      {"GradScaler::load_state_dict", "missing key"}),
      row<ValueError>("GradScaler::load_state_dict: negative scale",
                      [](Fixture& f) {
                        auto sd = f.scaler.state_dict();
                        sd.insert_or_assign("scale_factor", mg::scalar(-4.0, mg::DType::float64));
                        f.scaler.load_state_dict(sd);
                      },
                      {"GradScaler::load_state_dict", "scale_factor", "-4"}),
      row<ValueError>("clip_grad_norm: negative max_norm",
                      [](Fixture& f) { (void)mg::optim::clip_grad_norm(f.net.parameters(), -1.0); },
                      {"clip_grad_norm", "max_norm", "-1"}),
  };
}

std::vector<Row> optim_module_data_rows() {
  using mg::ShapeError, mg::DTypeError, mg::ValueError, mg::StateError, mg::IOError;
  auto load_opt = [](std::function<void(mg::StateDict&)> edit) {
    return [edit](Fixture& f) {
      mg::StateDict sd = f.opt->state_dict();
      edit(sd);
      f.opt->load_state_dict(sd);
    };
  };
  auto load_net = [](std::function<void(mg::StateDict&)> edit) {
    return [edit](Fixture& f) {
      mg::StateDict sd = f.net.state_dict();
      edit(sd);
      f.net.load_state_dict(sd);
    };
  };
  return {
      row<ValueError>("SGD: negative lr",
                      [](Fixture& f) { mg::optim::SGD opt(f.net.parameters(), {.lr = -1.0}); }, {"SGD", "lr", "-1"}),
      row<ValueError>("Adam: beta1 = 1",
                      [](Fixture& f) { mg::optim::Adam opt(f.net.parameters(), {.betas = {1.0, 0.999}}); },
                      {"Adam", "betas.first"}),
      row<ValueError>("SGD: no parameters", [](Fixture&) { mg::optim::SGD opt(std::vector<mg::Tensor>{}); }, {"SGD", "empty"}),
      row<ValueError>("SGD: a parameter twice", [](Fixture& f) { mg::optim::SGD opt({f.a, f.a}); },
                      {"SGD", "more than once"}),
      row<DTypeError>("SGD over an int32 tensor", [](Fixture& f) { mg::optim::SGD opt({f.ints}); },
                      {"SGD", "int32[2, 3]"}),
      row<ValueError>("set_lr(NaN)", [](Fixture& f) { f.opt->set_lr(kNaN); }, {"Adam", "lr", "nan"}),
      row<ValueError>("set_lr(-1)", [](Fixture& f) { f.opt->set_lr(-1.0); }, {"Adam", "lr", "-1"}),
      row<ValueError>("optimizer load_state_dict: missing option",
                      load_opt([](mg::StateDict& sd) { sd.erase("options.lr"); }), {"load_state_dict", "options.lr"}),
      row<ValueError>("optimizer load_state_dict: unexpected key",
                      load_opt([](mg::StateDict& sd) { sd.insert("bogus", mg::scalar(1.0)); }),
                      {"load_state_dict", "bogus"}),
      row<ShapeError>("optimizer load_state_dict: state of the wrong shape",
                      load_opt([](mg::StateDict& sd) { sd.insert_or_assign("state.0.exp_avg", mg::zeros({7})); }),
                      {"load_state_dict", "state.0.exp_avg", "float32[7]", "[3, 4]"}),
      row<DTypeError>("optimizer load_state_dict: state of the wrong dtype",
                      load_opt([](mg::StateDict& sd) {
                        sd.insert_or_assign("state.0.exp_avg", mg::zeros({3, 4}, DType::float64));
                      }),
                      {"load_state_dict", "state.0.exp_avg", "float64[3, 4]", "float32"}),
      row<ValueError>("optimizer load_state_dict: an SGD dict into Adam",
                      [](Fixture& f) {
                        mg::optim::SGD sgd(f.net.parameters(), {.lr = 0.1, .momentum = 0.9});
                        f.opt->load_state_dict(sgd.state_dict());
                      },
                      {"Adam", "load_state_dict"}),
      row<ShapeError>("module load_state_dict: wrong shape",
                      load_net([](mg::StateDict& sd) { sd.insert_or_assign("0.weight", mg::zeros({5, 5})); }),
                      {"load_state_dict", "0.weight", "float32[5, 5]", "float32[3, 4]"}),
      row<DTypeError>("module load_state_dict: wrong dtype",
                      load_net([](mg::StateDict& sd) {
                        sd.insert_or_assign("0.weight", mg::zeros({3, 4}, DType::float64));
                      }),
                      {"load_state_dict", "0.weight", "float64[3, 4]", "float32[3, 4]"}),
      row<ValueError>("module load_state_dict: missing key",
                      load_net([](mg::StateDict& sd) { sd.erase("2.bias"); }), {"load_state_dict", "2.bias"}),
      row<ValueError>("module load_state_dict: unexpected key",
                      load_net([](mg::StateDict& sd) { sd.insert("9.weight", mg::zeros({1})); }),
                      {"load_state_dict", "9.weight"}),
      row<ValueError>("StateDict::at of a missing key", [](Fixture& f) { (void)f.net.state_dict().at("nope"); },
                      {"StateDict::at", "nope"}),
      row<ValueError>("StateDict::insert of a duplicate key",
                      [](Fixture& f) { f.net.state_dict().insert("0.weight", f.a); }, {"StateDict::insert", "0.weight"}),
      row<ShapeError>("Sequential index out of range", [](Fixture& f) { (void)f.net[3]; }, {"Sequential", "3"}),
      row<IOError>("FashionMNIST from a missing directory",
                   [](Fixture&) { mg::data::FashionMNIST ds("/nonexistent/fmnist"); },
                   {"FashionMNIST", "/nonexistent/fmnist"}),
      row<ValueError>("DataLoader: batch_size 0",
                      [](Fixture&) { mg::data::DataLoader loader(small_dataset(), {.batch_size = 0}); },
                      {"DataLoader", "batch_size", "0"}),
      row<ValueError>("DataLoader::set_epoch(-1)",
                      [](Fixture&) {
                        mg::data::DataLoader loader(small_dataset(), {.batch_size = 2, .seed = 1});
                        loader.set_epoch(-1);
                      },
                      {"DataLoader::set_epoch", "-1"}),
      row<ShapeError>("TensorDataset: sample counts differ",
                      [](Fixture&) { mg::data::TensorDataset ds(mg::zeros({4, 2}), i64({0, 1, 2})); },
                      {"TensorDataset", "float32[4, 2]", "int64[3]"}),
      row<ShapeError>("TensorDataset::get_batch out of range",
                      [](Fixture&) { (void)small_dataset().get_batch(std::vector<int64_t>{5}); },
                      {"get_batch", "5", "4 samples"}),
      row<ShapeError>("TensorDataset::narrow out of range", [](Fixture&) { (void)small_dataset().narrow(2, 3); },
                      {"TensorDataset::narrow", "4 samples"}),
  };
}

// The ops composed of F:: ops (addmm, baddbmm, addbmm, prelu, the losses of
// ops/loss_composed.cpp): their own checks name them before any inner op runs.
std::vector<Row> composed_op_rows() {
  using mg::ShapeError, mg::DTypeError, mg::ValueError;
  return {
      row<ShapeError>("addmm: inner dims differ", [](Fixture& f) { (void)mg::F::addmm(f32({2, 5}), f.a, f.b); },
                      {"addmm", "mat1 float32[2, 3]", "mat2 float32[4, 5]"}),
      row<ShapeError>("addmm: input does not broadcast",
                      [](Fixture& f) { (void)mg::F::addmm(f32({3}), f.a, f32({3, 4})); },
                      {"addmm", "input float32[3]", "[2, 4]"}),
      row<DTypeError>("addmm: float64 input", [](Fixture& f) {
                        (void)mg::F::addmm(mg::zeros({2, 4}, DType::float64), f.a, f32({3, 4}));
                      }, {"addmm", "float64[2, 4]", "float32[2, 3]"}),
      row<DTypeError>("addmm of int32", [](Fixture& f) { (void)mg::F::addmm(f.ints, f.ints, mg::zeros({3, 3}, DType::int32)); },
                      {"addmm", "int32[2, 3]"}),
      row<ShapeError>("baddbmm: batch sizes differ",
                      [](Fixture&) { (void)mg::F::baddbmm(f32({2, 3, 5}), f32({2, 3, 4}), f32({3, 4, 5})); },
                      {"baddbmm", "batch1 float32[2, 3, 4]", "batch2 float32[3, 4, 5]"}),
      row<ShapeError>("baddbmm of 2-d operands", [](Fixture& f) { (void)mg::F::baddbmm(f.a, f.a, f32({3, 3})); },
                      {"baddbmm", "3-d", "float32[2, 3]"}),
      row<ShapeError>("addbmm: input does not broadcast",
                      [](Fixture&) { (void)mg::F::addbmm(f32({2, 3, 5}), f32({2, 3, 4}), f32({2, 4, 5})); },
                      {"addbmm", "input float32[2, 3, 5]", "[3, 5]"}),
      row<ShapeError>("prelu: weight of the wrong size", [](Fixture& f) { (void)mg::F::prelu(f.img, f32({3})); },
                      {"prelu", "float32[2, 2, 3, 3]", "weight float32[3]"}),
      row<ShapeError>("prelu: 2-d weight", [](Fixture& f) { (void)mg::F::prelu(f.img, f32({2, 1})); },
                      {"prelu", "weight float32[2, 1]"}),
      row<DTypeError>("prelu: float64 weight", [](Fixture& f) {
                        (void)mg::F::prelu(f.img, mg::full({1}, 0.25, DType::float64));
                      }, {"prelu", "float32[2, 2, 3, 3]", "float64[1]"}),
      row<ValueError>("PReLU(0)", [](Fixture&) { (void)mg::nn::PReLU(0); }, {"PReLU", "0"}),
      row<ValueError>("smooth_l1_loss: beta < 0", [](Fixture& f) {
                        (void)mg::F::smooth_l1_loss(f.a, f32({2, 3}), {.beta = -1.0});
                      }, {"smooth_l1_loss", "beta", "float32[2, 3]"}),
      row<ShapeError>("smooth_l1_loss: shapes differ", [](Fixture& f) { (void)mg::F::smooth_l1_loss(f.a, f32({3, 2})); },
                      {"smooth_l1_loss", "input float32[2, 3]", "target float32[3, 2]"}),
      row<ValueError>("huber_loss: delta 0", [](Fixture& f) {
                        (void)mg::F::huber_loss(f.a, f32({2, 3}), {.delta = 0.0});
                      }, {"huber_loss", "delta", "float32[2, 3]"}),
      row<DTypeError>("binary_cross_entropy: int32 target",
                      [](Fixture& f) { (void)mg::F::binary_cross_entropy(f.a, f.ints); },
                      {"binary_cross_entropy", "target int32[2, 3]"}),
      row<ShapeError>("binary_cross_entropy: weight does not broadcast", [](Fixture& f) {
                        (void)mg::F::binary_cross_entropy(f.a, f32({2, 3}), {.weight = f32({2})});
                      }, {"binary_cross_entropy", "weight float32[2]", "input float32[2, 3]"}),
      row<ValueError>("poisson_nll_loss: NaN eps", [](Fixture& f) {
                        (void)mg::F::poisson_nll_loss(f.a, f32({2, 3}), {.eps = kNaN});
                      }, {"poisson_nll_loss", "eps"}),
      row<ShapeError>("kl_div: shapes differ", [](Fixture& f) { (void)mg::F::kl_div(f.a, f32({2})); },
                      {"kl_div", "float32[2, 3]", "float32[2]"}),
      row<ShapeError>("soft_margin_loss: shapes differ",
                      [](Fixture& f) { (void)mg::F::soft_margin_loss(f.a, f32({3})); }, {"soft_margin_loss", "[3]"}),
      row<ValueError>("margin_ranking_loss: infinite margin", [](Fixture& f) {
                        (void)mg::F::margin_ranking_loss(f.a, f.a, f32({2, 3}), {.margin = kInf});
                      }, {"margin_ranking_loss", "margin", "input1 float32[2, 3]"}),
      row<ShapeError>("hinge_embedding_loss: shapes differ",
                      [](Fixture& f) { (void)mg::F::hinge_embedding_loss(f.a, f32({2})); }, {"hinge_embedding_loss"}),
      row<ShapeError>("cosine_embedding_loss: target of the wrong size", [](Fixture& f) {
                        (void)mg::F::cosine_embedding_loss(f.a, f.a, f32({3}));
                      }, {"cosine_embedding_loss", "target float32[3]", "input1 float32[2, 3]"}),
      row<ValueError>("triplet_margin_loss: p 0", [](Fixture& f) {
                        (void)mg::F::triplet_margin_loss(f.a, f.a, f.a, {.p = 0.0});
                      }, {"triplet_margin_loss", "p ", "anchor float32[2, 3]"}),
      row<ValueError>("multi_margin_loss: label out of range",
                      [](Fixture& f) { (void)mg::F::multi_margin_loss(f.a, i64({0, 3})); },
                      {"multi_margin_loss", "3", "float32[2, 3]"}),
      row<ValueError>("multi_margin_loss: p 3", [](Fixture& f) {
                        (void)mg::F::multi_margin_loss(f.a, i64({0, 1}), {.p = 3});
                      }, {"multi_margin_loss", "p must be 1 or 2", "input float32[2, 3]"}),
      row<ShapeError>("multi_margin_loss: weight of the wrong size", [](Fixture& f) {
                        (void)mg::F::multi_margin_loss(f.a, i64({0, 1}), {.weight = f32({2})});
                      }, {"multi_margin_loss", "weight float32[2]"}),
      row<ShapeError>("triplet_margin_loss: 4-d operands",
                      [](Fixture& f) { (void)mg::F::triplet_margin_loss(f.img, f.img, f.img); },
                      {"triplet_margin_loss", "float32[2, 2, 3, 3]"}),
  };
}

std::vector<Row> all_rows() {
  std::vector<Row> rows;
  for (auto part : {creation_and_tensor_rows(), elementwise_and_reduction_rows(), linalg_and_conv_rows(),
                    normalization_and_loss_rows(), shape_op_rows(), autodiff_and_amp_rows(), optim_module_data_rows(),
                    composed_op_rows()})
    for (auto& r : part) rows.push_back(std::move(r));
  return rows;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_table_covers_every_layer) { BOOST_TEST(all_rows().size() >= 60u); }

BOOST_AUTO_TEST_CASE(every_misuse_throws_its_type_names_the_call_and_changes_nothing) {
  const int threads = mg::num_threads();
  for (const Row& r : all_rows()) {
    BOOST_TEST_CONTEXT("row '" << r.name << "'") {
      Fixture f;
      if (r.setup) r.setup(f);
      const misuse::Snapshot before = misuse::snapshot(f);
      std::string what;
      bool threw = false;
      try {
        r.misuse(f);
      } catch (const mg::Error& e) {
        threw = true;
        what = e.what();
        const bool is_base = std::type_index(typeid(e)) == std::type_index(typeid(mg::Error));
        BOOST_TEST(!is_base, "threw the base mixgrad::Error: " << what);
        const bool exact = std::type_index(typeid(e)) == r.type;
        BOOST_TEST(exact, "expected " << r.type_name << ", got another mixgrad::Error: "
                                                                     << what);
      } catch (const std::exception& e) {
        threw = true;
        BOOST_ERROR("expected " << r.type_name << ", got a non-mixgrad exception: " << e.what());
      }
      BOOST_TEST(threw, "expected " << r.type_name << ", nothing was thrown");
      for (const std::string& needle : r.needles)
        BOOST_TEST(what.find(needle) != std::string::npos, "message lacks '" << needle << "': " << what);
      const misuse::Snapshot after = misuse::snapshot(f);
      BOOST_TEST(misuse::differences(before, after).empty(), "state changed: " << misuse::differences(before, after));
      // A row that failed to throw must not leak a bad setting into the next.
      mg::amp::low_prec_dtype = DType::bfloat16;
      mg::amp::high_prec_dtype = DType::float32;
      mg::set_num_threads(threads);
    }
  }
}

// The snapshot must see each kind of change the table rules out, or the
// "changes nothing" half of every row would pass vacuously.
BOOST_AUTO_TEST_CASE(the_snapshot_sees_every_kind_of_change) {
  const std::vector<std::pair<std::string, std::function<void(Fixture&)>>> changes{
      {"a parameter value", [](Fixture& f) { mg::nn::init::zeros_(f.net.parameters()[0]); }},
      {"a gradient value", [](Fixture& f) { f.net.parameters()[1].grad().data<float>()[0] += 1.0f; }},
      {"a cleared gradient", [](Fixture& f) { f.net.parameters()[1].set_grad(mg::Tensor()); }},
      {"a running statistic", [](Fixture& f) { (void)f.bn(f.img); }},
      {"an optimizer step", [](Fixture& f) { f.opt->step(); }},
      {"the learning rate", [](Fixture& f) { f.opt->set_lr(0.5); }},
      {"the scaler", [](Fixture& f) { f.scaler.update(); }},
      {"the attached set", [](Fixture& f) { f.gm.attach(f.a); }},
      {"an input tensor", [](Fixture& f) { f.a.data<float>()[0] += 1.0f; }},
      {"the amp settings", [](Fixture&) { mg::amp::low_prec_dtype = DType::float16; }},
  };
  for (const auto& [what, change] : changes) {
    BOOST_TEST_CONTEXT(what) {
      Fixture f;
      const misuse::Snapshot before = misuse::snapshot(f);
      change(f);
      BOOST_TEST(!misuse::differences(before, misuse::snapshot(f)).empty());
      mg::amp::low_prec_dtype = DType::bfloat16;
    }
  }
}
