// Size arithmetic on hostile sizes: every shape, extent, byte count, padding,
// start and length that does not fit in int64 is a ShapeError naming the op
// and the shape (never a small allocation written past its end), and an
// allocation the machine cannot serve is an OutOfMemoryError.
#include <boost/test/unit_test.hpp>

#include <climits>
#include <string>
#include <vector>

#include "backend/copy.hpp"
#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace mg = mixgrad;

namespace {

using test_util::check_error;

constexpr int64_t k2to(int n) { return int64_t{1} << n; }

const std::string k62 = std::to_string(k2to(62));  // "4611686018427387904"

}  // namespace

BOOST_AUTO_TEST_SUITE(sizes)

BOOST_AUTO_TEST_CASE(creation_ops_reject_byte_counts_that_overflow) {
  const int64_t before = mg::allocated_bytes();
  // 2^62 float32 elements are 2^64 bytes: the product used to wrap to 0.
  check_error<mg::ShapeError>([] { mg::zeros({k2to(62)}); }, {"zeros", "[" + k62 + "]", "float32"});
  check_error<mg::ShapeError>([] { mg::ones({k2to(62)}); }, {"ones", "[" + k62 + "]"});
  check_error<mg::ShapeError>([] { mg::full({k2to(62)}, 1.0); }, {"full", "[" + k62 + "]"});
  check_error<mg::ShapeError>([] { mg::empty({k2to(62)}); }, {"empty", "[" + k62 + "]"});
  check_error<mg::ShapeError>([] { mg::uniform({k2to(62)}); }, {"uniform", "[" + k62 + "]"});
  check_error<mg::ShapeError>([] { mg::normal({2, k2to(61)}, 0, 1, mg::DType::float16); },
                              {"normal", "[2, 2305843009213693952]", "float16"});
  // 2^61 float32 is exactly 2^63 bytes, one more than int64 holds.
  check_error<mg::ShapeError>([] { mg::zeros({k2to(61)}); }, {"zeros", "bytes"});
  check_error<mg::ShapeError>([] { mg::zeros({k2to(60)}, mg::DType::float64); }, {"zeros", "float64"});
  BOOST_TEST(mg::allocated_bytes() == before);
}

BOOST_AUTO_TEST_CASE(creation_ops_reject_element_counts_that_overflow) {
  check_error<mg::ShapeError>([] { mg::zeros({k2to(32), k2to(32)}, mg::DType::bool_); },
                              {"zeros", "[4294967296, 4294967296]", "elements"});
  check_error<mg::ShapeError>([] { mg::tensor(std::vector<float>(4), {k2to(62) + 1, 4}); },
                              {"tensor", "[4611686018427387905, 4]"});
  // An empty shape can still be too large to describe: its strides would wrap.
  check_error<mg::ShapeError>([] { mg::zeros({0, k2to(40), k2to(40)}); }, {"zeros", "[0, 1099511627776, 1099511627776]"});
  // A huge empty tensor whose strides fit is fine.
  const mg::Tensor e = mg::zeros({0, k2to(40)});
  BOOST_TEST(e.numel() == 0);
  BOOST_TEST(e.strides() == mg::Shape({k2to(40), 1}));
}

BOOST_AUTO_TEST_CASE(negative_extents_are_rejected) {
  check_error<mg::ShapeError>([] { mg::zeros({-1}); }, {"zeros", "negative", "[-1]"});
  check_error<mg::ShapeError>([] { mg::empty({2, -3}); }, {"empty", "negative", "[2, -3]"});
  check_error<mg::ShapeError>([] { mg::uniform({-2, -2}); }, {"uniform", "[-2, -2]"});
  check_error<mg::ShapeError>([] { mg::tensor(std::vector<float>{1.f}, {-1, -1}); }, {"tensor", "[-1, -1]"});
  check_error<mg::ShapeError>([] { mg::zeros({4}).reshape({-2, -2}); }, {"reshape", "negative"});
  check_error<mg::ShapeError>([] { mg::F::broadcast_to(mg::zeros({3}), {-1, 3}); }, {"broadcast_to", "[-1, 3]"});
  check_error<mg::ShapeError>([] { mg::Storage(-1, mg::Device::cpu()); }, {"Storage", "-1"});
}

BOOST_AUTO_TEST_CASE(allocation_failure_is_out_of_memory_error) {
  const int64_t before = mg::allocated_bytes();
  // A valid size (2^54 bytes) that no host has: not std::bad_alloc.
  check_error<mg::OutOfMemoryError>([] { mg::empty({k2to(52)}); },
                                    {"empty", "float32[4503599627370496]", "cannot allocate", "cpu"});
  check_error<mg::OutOfMemoryError>([] { mg::zeros({k2to(20), k2to(34)}, mg::DType::bool_); },
                                    {"bool[1048576, 17179869184]", "cannot allocate"});
  BOOST_TEST(mg::allocated_bytes() == before);
  BOOST_TEST(mg::zeros({3}).numel() == 3);  // the allocator still works
}

BOOST_AUTO_TEST_CASE(shape_arithmetic_is_checked) {
  check_error<mg::ShapeError>([] { mg::Shape({k2to(32), k2to(32)}).numel(); },
                              {"Shape::numel", "[4294967296, 4294967296]"});
  BOOST_TEST(mg::Shape({k2to(31), k2to(31)}).numel() == k2to(62));
  BOOST_TEST(mg::Shape({k2to(40), 0, k2to(20)}).numel() == 0);
  check_error<mg::ShapeError>([] { mg::contiguous_strides(mg::Shape({4, k2to(62), 4})); },
                              {"contiguous_strides", "[4, " + k62 + ", 4]"});
  BOOST_TEST(mg::contiguous_strides(mg::Shape({k2to(31), k2to(31)})) == mg::Shape({k2to(31), 1}));
  check_error<mg::ShapeError>([] { mg::broadcast_shapes({0, k2to(40), 1}, {0, 1, k2to(40)}, "add"); },
                              {"add", "[0, 1099511627776, 1099511627776]"});
}

BOOST_AUTO_TEST_CASE(reshape_rejects_shapes_whose_count_wraps) {
  const mg::Tensor x = mg::arange(0.0, 4.0, 1.0);
  // (2^62 + 1) * 4 wraps to 4 = x.numel(): this used to be a view reading far past x.
  check_error<mg::ShapeError>([&] { x.reshape({k2to(62) + 1, 4}); }, {"reshape", "[4611686018427387905, 4]"});
  check_error<mg::ShapeError>([&] { x.reshape({k2to(62), 4, -1}); }, {"reshape", "float32[4]", "[" + k62 + ", 4, -1]"});
  check_error<mg::ShapeError>([&] { mg::zeros({0}).reshape({-1, k2to(40), k2to(40)}); },
                              {"reshape", "float32[0]", "[-1, 1099511627776, 1099511627776]"});
  check_error<mg::ShapeError>([&] { x.reshape({-1, 0}); }, {"reshape", "float32[4]", "[-1, 0]"});
  BOOST_TEST(x.reshape({2, -1}).shape() == mg::Shape({2, 2}));
  BOOST_TEST(mg::F::flatten(x.reshape({2, 2})).shape() == mg::Shape({4}));
}

BOOST_AUTO_TEST_CASE(narrow_rejects_ranges_whose_end_wraps) {
  const mg::Tensor x = mg::arange(0.0, 4.0, 1.0);
  // 1 + INT64_MAX wraps negative and passed the old `start + length > size` test.
  check_error<mg::ShapeError>([&] { x.narrow(0, 1, INT64_MAX); }, {"narrow", "9223372036854775807", "float32[4]"});
  check_error<mg::ShapeError>([&] { mg::F::narrow(x, 0, INT64_MAX, 1); }, {"narrow", "float32[4]"});
  check_error<mg::ShapeError>([&] { x.narrow(0, INT64_MIN, 1); }, {"narrow", "float32[4]"});
  check_error<mg::ShapeError>([&] { x.narrow(0, 5, 0); }, {"narrow", "float32[4]"});
  check_error<mg::ShapeError>([&] { x.narrow(0, 0, -1); }, {"narrow", "float32[4]"});
  BOOST_TEST(x.narrow(0, -1, 1).item<float>() == 3.f);
  BOOST_TEST(x.narrow(0, 4, 0).numel() == 0);

  mg::data::TensorDataset ds(mg::zeros({4, 2}), mg::zeros({4}));
  check_error<mg::ShapeError>([&] { ds.narrow(1, INT64_MAX); }, {"TensorDataset::narrow", "9223372036854775807"});
  check_error<mg::ShapeError>([&] { ds.narrow(INT64_MAX, 1); }, {"TensorDataset::narrow", "float32[4, 2]"});
  BOOST_TEST(ds.narrow(1, 3).size() == 3);
}

BOOST_AUTO_TEST_CASE(concat_and_broadcast_results_are_checked) {
  // Two empty [2^62, 0] tensors join into 2^63 rows (bool: 2^62 one-byte rows fit).
  const mg::Tensor e = mg::zeros({k2to(62), 0}, mg::DType::bool_);
  check_error<mg::ShapeError>([&] { mg::F::concat({e, e}, 0); }, {"concat", "bool[" + k62 + ", 0]"});
  BOOST_TEST(mg::F::concat({e, mg::zeros({5, 0}, mg::DType::bool_)}, 0).shape() == mg::Shape({k2to(62) + 5, 0}));
  check_error<mg::ShapeError>([&] { mg::zeros({k2to(62), 0}); }, {"zeros", "float32", "[" + k62 + ", 0]"});
  const mg::Tensor a = mg::zeros({0, k2to(40), 1}), b = mg::zeros({0, 1, k2to(40)});
  check_error<mg::ShapeError>([&] { mg::F::add(a, b); }, {"add", "[0, 1099511627776, 1099511627776]"});
}

BOOST_AUTO_TEST_CASE(matmul_and_linear_output_shapes_are_checked) {
  const mg::Tensor a = mg::zeros({k2to(40), 0}), b = mg::zeros({0, k2to(40)});
  check_error<mg::ShapeError>([&] { mg::F::matmul(a, b); }, {"matmul", "[1099511627776, 1099511627776]"});
  check_error<mg::ShapeError>([&] { mg::F::matmul(mg::zeros({2, 3}), mg::zeros({4, 2})); }, {"matmul", "float32[2, 3]"});
  check_error<mg::ShapeError>([&] { mg::F::matmul(mg::zeros({k2to(31), 1, 0}), mg::zeros({1, 0, k2to(40)})); },
                              {"matmul", "[2147483648, 1, 1099511627776]"});
  const mg::Tensor w = mg::zeros({k2to(40), 0});
  check_error<mg::ShapeError>([&] { mg::F::linear(a, w); }, {"linear", "[1099511627776, 1099511627776]"});
  BOOST_TEST(mg::F::matmul(mg::zeros({3, 0}), mg::zeros({0, 2})).to_vector<float>() == std::vector<float>(6, 0.f),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(conv2d_output_sizes_are_checked) {
  const mg::Tensor x = mg::zeros({1, 1, 4, 4}), w = mg::zeros({1, 1, 3, 3});
  // Padding 2^40: a 2^41 x 2^41 output, 2^82 elements.
  check_error<mg::ShapeError>([&] { mg::F::conv2d(x, w, {}, {.padding = {k2to(40), k2to(40)}}); },
                              {"conv2d", "[1, 1, 2199023255554, 2199023255554]"});
  // 2 * padding itself overflows.
  check_error<mg::ShapeError>([&] { mg::F::conv2d(x, w, {}, {.padding = {k2to(62), 0}}); },
                              {"conv2d", "size overflow", "float32[1, 1, 4, 4]", k62});
  // dilation * (kernel - 1) overflows.
  check_error<mg::ShapeError>([&] { mg::F::conv2d(x, w, {}, {.dilation = {k2to(62), 1}}); },
                              {"conv2d", "size overflow", "dilation", "float32[1, 1, 3, 3]"});
  // A kernel larger than the input, with a stride: (2 - 3) / 2 + 1 used to round to a 1x1 output.
  check_error<mg::ShapeError>([&] { mg::F::conv2d(mg::zeros({1, 1, 2, 2}), w, {}, {.stride = {2, 2}}); },
                              {"conv2d", "larger than padded input", "float32[1, 1, 2, 2]"});
  check_error<mg::ShapeError>([&] { mg::F::conv2d(x, mg::zeros({1, 1, 0, 3})); }, {"conv2d", "empty kernel"});
  BOOST_TEST(mg::F::conv2d(x, w, {}, {.padding = {1, 1}}).shape() == mg::Shape({1, 1, 4, 4}));
}

BOOST_AUTO_TEST_CASE(pooling_output_sizes_are_checked) {
  const mg::Tensor x = mg::zeros({1, 1, 4, 4});
  // 2^31 x 2^31 float32 outputs are 2^64 bytes.
  check_error<mg::ShapeError>([&] { mg::F::adaptive_avg_pool2d(x, {k2to(31), k2to(31)}); },
                              {"adaptive_avg_pool2d", "[1, 1, 2147483648, 2147483648]"});
  check_error<mg::OutOfMemoryError>([&] { mg::F::adaptive_avg_pool2d(x, {k2to(30), k2to(30)}); },
                                    {"float32[1, 1, 1073741824, 1073741824]", "cannot allocate"});
  // The window bounds (o + 1) * H do not fit in int64: rejected whatever the batch
  // (an empty one keeps the input cheap to make).
  check_error<mg::ShapeError>([&] { mg::F::adaptive_avg_pool2d(mg::zeros({0, 1, k2to(40), 1}), {k2to(30), 1}); },
                              {"adaptive_avg_pool2d", "size overflow", "float32[0, 1, 1099511627776, 1]"});
  // kernel + 2 * padding overflows.
  check_error<mg::ShapeError>(
      [&] { mg::F::max_pool2d(x, {.kernel_size = {INT64_MAX, 2}, .padding = {k2to(62) - 1, 0}}); },
      {"max_pool2d", "size overflow", "float32[1, 1, 4, 4]"});
  // A window of 2^80 elements (1x1 output): the divisor and the work estimate would wrap.
  check_error<mg::ShapeError>(
      [&] { mg::F::avg_pool2d(x, {.kernel_size = {k2to(40), k2to(40)}, .padding = {k2to(39), k2to(39)}}); },
      {"avg_pool2d", "size overflow", "float32[1, 1, 4, 4]"});
  // Padding larger than half the kernel, with 2 * padding past int64.
  check_error<mg::ShapeError>([&] { mg::F::max_pool2d(x, {.kernel_size = {2, 2}, .padding = {k2to(62), 0}}); },
                              {"max_pool2d", "padding", "float32[1, 1, 4, 4]"});
  BOOST_TEST(mg::F::max_pool2d(x, {.kernel_size = {2, 2}}).shape() == mg::Shape({1, 1, 2, 2}));
}

BOOST_AUTO_TEST_CASE(layer_constructors_check_their_parameter_sizes) {
  const int64_t before = mg::allocated_bytes();
  // [2^31, 2^31] float32 is 2^64 bytes: this used to allocate 0 and initialise 2^62 floats.
  check_error<mg::ShapeError>([] { mg::nn::Linear(k2to(31), k2to(31)); }, {"Linear", "[2147483648, 2147483648]"});
  check_error<mg::OutOfMemoryError>([] { mg::nn::Linear(k2to(30), k2to(30)); },
                                    {"float32[1073741824, 1073741824]", "cannot allocate"});
  check_error<mg::ShapeError>([] { mg::nn::Conv2d(k2to(31), k2to(31), 3); },
                              {"Conv2d", "[2147483648, 2147483648, 3, 3]"});
  check_error<mg::ShapeError>([] { mg::nn::BatchNorm2d(k2to(62)); }, {"BatchNorm2d", "[" + k62 + "]"});
  check_error<mg::ShapeError>([] { mg::nn::LayerNorm(mg::Shape{k2to(62), 4}); }, {"LayerNorm", "[" + k62 + ", 4]"});
  check_error<mg::ShapeError>([] { mg::nn::init::fan_in_and_fan_out({k2to(62), k2to(62), 4}); },
                              {"nn::init", "[" + k62 + ", " + k62 + ", 4]"});
  BOOST_TEST(mg::allocated_bytes() == before);
  BOOST_TEST((mg::nn::init::fan_in_and_fan_out({6, 5, 3, 3}) == std::make_pair(int64_t{45}, int64_t{54})));
}

BOOST_AUTO_TEST_CASE(data_loader_rejects_a_negative_dataset_size) {
  struct Broken : mg::data::Dataset {
    int64_t size() const override { return -5; }
    mg::data::Batch get_batch(std::span<const int64_t>) const override { return {}; }
  };
  mg::data::DataLoader loader(std::make_shared<Broken>(), {.batch_size = 2});
  check_error<mg::ShapeError>([&] { loader.begin(); }, {"DataLoader", "-5"});
}

BOOST_AUTO_TEST_CASE(backend_copy_and_accumulate_reject_mismatched_shapes) {
  // Both kernels walk dst's shape through src's strides: a smaller src would be over-read.
  const mg::Tensor dst = mg::zeros({64}), src = mg::ones({10});
  check_error<mg::ShapeError>([&] { mg::backend::accumulate(dst, src); }, {"accumulate", "float32[10]", "float32[64]"});
  check_error<mg::ShapeError>([&] { mg::backend::copy(src, dst); }, {"copy", "float32[10]", "float32[64]"});
  BOOST_TEST(dst.to_vector<float>() == std::vector<float>(64, 0.f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
