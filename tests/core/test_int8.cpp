// int8 and uint8 tensors: the dtypes' properties, creation, conversion to
// and from every dtype (expected values written out by hand, PyTorch's
// results on x86), type promotion, integer arithmetic, comparisons and
// reductions, and the refusals of ops that need floating or int64 tensors.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "../common/test_util.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::DType;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <class T>
std::vector<T> as(const mg::Tensor& t) {
  BOOST_TEST_REQUIRE(t.dtype() == mg::dtype_of<T>());
  const mg::Tensor c = t.contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

// int8_t / uint8_t print as characters: compare them as ints.
template <class T>
std::vector<int> ints(const mg::Tensor& t) {
  std::vector<int> out;
  for (T v : as<T>(t)) out.push_back(static_cast<int>(v));
  return out;
}

mg::Tensor i8(std::vector<int8_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return mg::tensor(v, mg::Shape{n});
}
mg::Tensor u8(std::vector<uint8_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return mg::tensor(v, mg::Shape{n});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(int8_uint8)

BOOST_AUTO_TEST_CASE(dtype_properties) {
  BOOST_TEST(mg::to_string(DType::int8) == "int8");
  BOOST_TEST(mg::to_string(DType::uint8) == "uint8");
  std::ostringstream os;
  os << DType::uint8;
  BOOST_TEST(os.str() == "uint8");
  BOOST_TEST(mg::element_size(DType::int8) == 1);
  BOOST_TEST(mg::element_size(DType::uint8) == 1);
  for (DType d : {DType::int8, DType::uint8}) {
    BOOST_TEST(!mg::is_floating_point(d));
    BOOST_TEST(!mg::is_low_precision(d));
    BOOST_TEST(mg::is_integral(d));
  }
  BOOST_TEST(!mg::is_integral(DType::bool_));
  BOOST_TEST(!mg::is_integral(DType::float16));
  BOOST_TEST(mg::dtype_of<int8_t>() == DType::int8);
  BOOST_TEST(mg::dtype_of<uint8_t>() == DType::uint8);
  BOOST_TEST((std::is_same_v<mg::dtype_traits<DType::int8>::type, int8_t>));
  BOOST_TEST((std::is_same_v<mg::dtype_traits<DType::uint8>::type, uint8_t>));
  BOOST_TEST(mg::visit_dtype(DType::uint8, []<class T>() { return std::is_same_v<T, uint8_t>; }));
  // Appended after bool: the enumerators' numbers are stored in files.
  BOOST_TEST(static_cast<int>(DType::bool_) == 6);
  BOOST_TEST(static_cast<int>(DType::int8) == 7);
  BOOST_TEST(static_cast<int>(DType::uint8) == 8);
}

BOOST_AUTO_TEST_CASE(promotion_table) {
  struct Row {
    DType a, b, want;
  };
  // PyTorch's table, except int8 with uint8: int16 there, int32 here (no int16).
  const Row rows[] = {
      {DType::int8, DType::int8, DType::int8},           {DType::uint8, DType::uint8, DType::uint8},
      {DType::int8, DType::uint8, DType::int32},         {DType::int8, DType::bool_, DType::int8},
      {DType::uint8, DType::bool_, DType::uint8},        {DType::int8, DType::int32, DType::int32},
      {DType::uint8, DType::int32, DType::int32},        {DType::int8, DType::int64, DType::int64},
      {DType::uint8, DType::int64, DType::int64},        {DType::int8, DType::float16, DType::float16},
      {DType::uint8, DType::bfloat16, DType::bfloat16},  {DType::int8, DType::float32, DType::float32},
      {DType::uint8, DType::float32, DType::float32},    {DType::uint8, DType::float64, DType::float64},
      {DType::int8, DType::float64, DType::float64},     {DType::int8, DType::bfloat16, DType::bfloat16},
  };
  for (const Row& r : rows) {
    BOOST_TEST_CONTEXT(r.a << " with " << r.b) {
      BOOST_TEST(mg::promote_types(r.a, r.b) == r.want);
      BOOST_TEST(mg::promote_types(r.b, r.a) == r.want);
    }
  }
  // The ops follow it.
  BOOST_TEST(F::add(i8({1}), u8({1})).dtype() == DType::int32);
  BOOST_TEST(F::add(u8({1}), mg::tensor({0.5f}, {1})).dtype() == DType::float32);
  BOOST_TEST(F::mul(i8({1}), mg::tensor(std::vector<int64_t>{2}, {1})).dtype() == DType::int64);
}

BOOST_AUTO_TEST_CASE(creation) {
  BOOST_TEST(ints<int8_t>(mg::zeros({3}, DType::int8)) == std::vector<int>({0, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(mg::ones({2}, DType::uint8)) == std::vector<int>({1, 1}), boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(mg::full({2}, -128, DType::int8)) == std::vector<int>({-128, -128}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(mg::full({2}, 255.9, DType::uint8)) == std::vector<int>({255, 255}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(mg::arange(250.0, 256.0, 2.0, DType::uint8)) == std::vector<int>({250, 252, 254}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(mg::arange(3, DType::int8)) == std::vector<int>({0, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(mg::tensor(std::vector<double>{-3.9, 7.2}, {2}, DType::int8)) == std::vector<int>({-3, 7}),
             boost::test_tools::per_element());
  BOOST_TEST(mg::zeros_like(u8({4, 5})).dtype() == DType::uint8);

  // Values the dtype cannot hold are refused (PyTorch: "value cannot be converted to type int8_t without overflow").
  test_util::check_error<mg::ValueError>([] { (void)mg::full({2}, 300, DType::int8); }, {"full", "300", "int8"});
  test_util::check_error<mg::ValueError>([] { (void)mg::full({2}, -1, DType::uint8); }, {"full", "uint8"});
  test_util::check_error<mg::ValueError>([] { (void)mg::full({1}, kNaN, DType::uint8); }, {"full", "uint8"});
  test_util::check_error<mg::ValueError>([] { (void)mg::arange(250.0, 260.0, 1.0, DType::uint8); },
                                         {"arange", "uint8"});
  test_util::check_error<mg::ValueError>([] { (void)mg::arange(-129.0, 0.0, 1.0, DType::int8); }, {"arange", "int8"});
}

BOOST_AUTO_TEST_CASE(floats_to_int8_and_uint8) {
  // Truncation toward zero, then modulo 256; NaN, infinities and values beyond int64 give 0.
  const std::vector<float> x = {0.9f, -0.9f, 1.5f, -1.5f, 127.f, -128.f, 128.f, 300.f, -129.f, 255.7f,
                                kNaN, kInf,  -kInf, 1e30f};
  const mg::Tensor t = mg::tensor(x, {static_cast<int64_t>(x.size())});
  const std::vector<int> want8 = {0, 0, 1, -1, 127, -128, -128, 44, 127, -1, 0, 0, 0, 0};
  const std::vector<int> wantu8 = {0, 0, 1, 255, 127, 128, 128, 44, 127, 255, 0, 0, 0, 0};
  for (DType from : {DType::float32, DType::float64}) {
    BOOST_TEST_CONTEXT(from) {
      const mg::Tensor src = t.to(from);
      BOOST_TEST(ints<int8_t>(src.to(DType::int8)) == want8, boost::test_tools::per_element());
      BOOST_TEST(ints<uint8_t>(src.to(DType::uint8)) == wantu8, boost::test_tools::per_element());
    }
  }
  // 16-bit floats (these values are exact in both).
  const mg::Tensor h = mg::tensor({-1.5f, 200.f, 300.f, -0.5f}, {4});
  for (DType from : {DType::float16, DType::bfloat16}) {
    BOOST_TEST_CONTEXT(from) {
      BOOST_TEST(ints<int8_t>(h.to(from).to(DType::int8)) == std::vector<int>({-1, -56, 44, 0}),
                 boost::test_tools::per_element());
      BOOST_TEST(ints<uint8_t>(h.to(from).to(DType::uint8)) == std::vector<int>({255, 200, 44, 0}),
                 boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(integers_and_bool_to_int8_and_uint8) {
  const mg::Tensor i32 = mg::tensor(std::vector<int32_t>{127, 128, -129, 1000, -1, 0}, {6});
  BOOST_TEST(ints<int8_t>(i32.to(DType::int8)) == std::vector<int>({127, -128, 127, -24, -1, 0}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(i32.to(DType::uint8)) == std::vector<int>({127, 128, 127, 232, 255, 0}),
             boost::test_tools::per_element());
  const mg::Tensor i64 = mg::tensor(std::vector<int64_t>{(int64_t{1} << 32) + 5, -2}, {2});
  BOOST_TEST(ints<int8_t>(i64.to(DType::int8)) == std::vector<int>({5, -2}), boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(i64.to(DType::uint8)) == std::vector<int>({5, 254}), boost::test_tools::per_element());
  const mg::Tensor b = mg::tensor(std::vector<bool>{true, false}, {2});
  BOOST_TEST(ints<int8_t>(b.to(DType::int8)) == std::vector<int>({1, 0}), boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(b.to(DType::uint8)) == std::vector<int>({1, 0}), boost::test_tools::per_element());
  // Between the two.
  BOOST_TEST(ints<uint8_t>(i8({-128, -1, 0, 127}).to(DType::uint8)) == std::vector<int>({128, 255, 0, 127}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(u8({0, 127, 128, 255}).to(DType::int8)) == std::vector<int>({0, 127, -128, -1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(int8_and_uint8_to_every_dtype) {
  const mg::Tensor s = i8({-128, -1, 0, 127});
  const mg::Tensor u = u8({0, 1, 128, 255});
  for (DType to : {DType::float32, DType::float16, DType::bfloat16, DType::float64}) {
    BOOST_TEST_CONTEXT(to) {
      BOOST_TEST(s.to(to).to_vector<double>() == std::vector<double>({-128, -1, 0, 127}),
                 boost::test_tools::per_element());
      BOOST_TEST(u.to(to).to_vector<double>() == std::vector<double>({0, 1, 128, 255}),
                 boost::test_tools::per_element());
    }
  }
  BOOST_TEST(as<int32_t>(s.to(DType::int32)) == std::vector<int32_t>({-128, -1, 0, 127}),
             boost::test_tools::per_element());
  BOOST_TEST(as<int64_t>(u.to(DType::int64)) == std::vector<int64_t>({0, 1, 128, 255}),
             boost::test_tools::per_element());
  BOOST_TEST(as<bool>(s.to(DType::bool_)) == std::vector<bool>({true, true, false, true}),
             boost::test_tools::per_element());
  BOOST_TEST(as<bool>(u.to(DType::bool_)) == std::vector<bool>({false, true, true, true}),
             boost::test_tools::per_element());
  // Through a strided view too.
  const mg::Tensor m = F::transpose(mg::tensor(std::vector<uint8_t>{1, 2, 3, 4, 5, 6}, {2, 3}), 0, 1);
  BOOST_TEST(m.to(DType::float32).to_vector<float>() == std::vector<float>({1, 4, 2, 5, 3, 6}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(item_at_and_printing) {
  BOOST_TEST(mg::scalar(-128, DType::int8).item<int>() == -128);
  BOOST_TEST(mg::scalar(255, DType::uint8).item<double>() == 255.0);
  BOOST_TEST(static_cast<int>(u8({7, 200}).at<uint8_t>({1})) == 200);
  std::ostringstream os;
  os << i8({-1, 65});  // numbers, not the characters '\xff' and 'A'
  BOOST_TEST(os.str().find("dtype=int8") != std::string::npos, os.str());
  BOOST_TEST(os.str().find("-1 65") != std::string::npos, os.str());
}

BOOST_AUTO_TEST_CASE(arithmetic_wraps_as_in_pytorch) {
  BOOST_TEST(ints<int8_t>(F::add(i8({100, -100, 127}), i8({100, -100, 1}))) == std::vector<int>({-56, 56, -128}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(F::add(u8({250, 3}), u8({10, 5}))) == std::vector<int>({4, 8}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(F::sub(u8({3}), u8({5}))) == std::vector<int>({254}), boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::mul(i8({16, -3}), i8({16, 5}))) == std::vector<int>({0, -15}),
             boost::test_tools::per_element());
  // Mixed: int8 with uint8 computes in int32, with float32 in float32.
  BOOST_TEST(as<int32_t>(F::add(i8({-1, 100}), u8({255, 200}))) == std::vector<int32_t>({254, 300}),
             boost::test_tools::per_element());
  BOOST_TEST(as<float>(F::add(u8({200}), mg::tensor({0.5f}, {1}))) == std::vector<float>({200.5f}),
             boost::test_tools::per_element());
  // Broadcasting and scalars (a scalar takes the tensor's dtype).
  BOOST_TEST(ints<uint8_t>(F::add(mg::tensor(std::vector<uint8_t>{1, 2, 3, 4}, {2, 2}), u8({10, 250}))) ==
                 std::vector<int>({11, 252, 13, 254}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(F::add(u8({250}), 10.0)) == std::vector<int>({4}), boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::mul(i8({3}), 2.0)) == std::vector<int>({6}), boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::sub(1.0, i8({3}))) == std::vector<int>({-2}), boost::test_tools::per_element());
  // Unary ops that take integers.
  BOOST_TEST(ints<uint8_t>(F::neg(u8({1, 0}))) == std::vector<int>({255, 0}), boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::neg(i8({-128, 5}))) == std::vector<int>({-128, -5}), boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::abs(i8({-5, -128, 7}))) == std::vector<int>({5, -128, 7}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(F::abs(u8({200, 0}))) == std::vector<int>({200, 0}), boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::relu(i8({-3, 4}))) == std::vector<int>({0, 4}), boost::test_tools::per_element());
  // clamp's bounds saturate to the dtype's range.
  BOOST_TEST(ints<uint8_t>(F::clamp(u8({0, 100, 255}), -1, 300)) == std::vector<int>({0, 100, 255}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(F::clamp(u8({0, 100, 255}), 10, 200)) == std::vector<int>({10, 100, 200}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::clamp(i8({-100, 100, -128}), -200, 50)) == std::vector<int>({-100, 50, -128}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<uint8_t>(F::maximum(u8({3, 200}), u8({100, 7}))) == std::vector<int>({100, 200}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::minimum(i8({-3, 20}), i8({1, -7}))) == std::vector<int>({-3, -7}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(comparisons_where_and_reductions) {
  // uint8 200 with int8 -1 compares in int32: no wrap-around surprises.
  BOOST_TEST(as<bool>(F::gt(u8({200, 0}), i8({-1, 1}))) == std::vector<bool>({true, false}),
             boost::test_tools::per_element());
  BOOST_TEST(as<bool>(F::eq(u8({255, 3}), u8({255, 4}))) == std::vector<bool>({true, false}),
             boost::test_tools::per_element());
  BOOST_TEST(as<bool>(F::lt(i8({-5, 5}), 0.0)) == std::vector<bool>({true, false}), boost::test_tools::per_element());
  const mg::Tensor cond = mg::tensor(std::vector<bool>{true, false, true}, {3});
  BOOST_TEST(ints<uint8_t>(F::where(cond, u8({1, 2, 3}), u8({7, 8, 9}))) == std::vector<int>({1, 8, 3}),
             boost::test_tools::per_element());
  // Sums go to int64 (no wrap), max / min keep the dtype.
  const mg::Tensor s = F::sum(u8({255, 255, 10}));
  BOOST_TEST(s.dtype() == DType::int64);
  BOOST_TEST(s.item<int64_t>() == 520);
  BOOST_TEST(F::sum(i8({100, 100, 100, -128})).item<int64_t>() == 172);
  BOOST_TEST(F::sum(mg::tensor(std::vector<int8_t>{1, 2, 3, 4}, {2, 2}), {0}).to_vector<int64_t>() ==
                 std::vector<int64_t>({4, 6}),
             boost::test_tools::per_element());
  // Exact past float32's 2^24: the sums accumulate in int64, not float.
  const int64_t n = int64_t{1} << 22;
  BOOST_TEST(F::sum(mg::full({n}, 255.0, DType::uint8)).item<int64_t>() == 255 * n);
  BOOST_TEST(F::sum(mg::full({n}, -127.0, DType::int8)).item<int64_t>() == -127 * n);
  const mg::Tensor mx = F::max(u8({3, 250, 7}));
  BOOST_TEST(mx.dtype() == DType::uint8);
  BOOST_TEST(mx.item<int>() == 250);
  BOOST_TEST(F::min(i8({3, -128, 7})).item<int>() == -128);
  BOOST_TEST(F::argmax(u8({3, 250, 7}), 0).item<int64_t>() == 1);
  // Sorting compares the values, not their bytes as signed or unsigned.
  const auto [sv, si] = F::sort(i8({5, -128, 127, -1}));
  BOOST_TEST(ints<int8_t>(sv) == std::vector<int>({-128, -1, 5, 127}), boost::test_tools::per_element());
  BOOST_TEST(si.to_vector<int64_t>() == std::vector<int64_t>({1, 3, 0, 2}), boost::test_tools::per_element());
  const auto [tv, ti] = F::topk(u8({3, 250, 7, 128}), 2);
  BOOST_TEST(ints<uint8_t>(tv) == std::vector<int>({250, 128}), boost::test_tools::per_element());
  BOOST_TEST(ti.to_vector<int64_t>() == std::vector<int64_t>({1, 3}), boost::test_tools::per_element());
  // Shape ops keep the dtype and the bytes.
  const mg::Tensor c = F::concat({u8({1, 2}), u8({255})}, 0);
  BOOST_TEST(ints<uint8_t>(c) == std::vector<int>({1, 2, 255}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(ops_that_need_floating_tensors_refuse) {
  const mg::Tensor a = mg::tensor(std::vector<int8_t>{1, 2, 3, 4}, {2, 2});
  const mg::Tensor b = mg::tensor(std::vector<uint8_t>{1, 2, 3, 4}, {2, 2});
  test_util::check_error<mg::DTypeError>([&] { (void)F::exp(a); }, {"exp", "int8[2, 2]"});
  test_util::check_error<mg::DTypeError>([&] { (void)F::sigmoid(b); }, {"sigmoid", "uint8[2, 2]"});
  test_util::check_error<mg::DTypeError>([&] { (void)F::div(b, b); }, {"div", "uint8[2, 2]"});
  test_util::check_error<mg::DTypeError>([&] { (void)F::matmul(a, a); }, {"matmul", "int8"});
  test_util::check_error<mg::DTypeError>([&] { (void)F::softmax(b); }, {"softmax", "uint8"});
  test_util::check_error<mg::DTypeError>([&] { (void)F::mean(a); }, {"mean", "int8[2, 2]"});
  test_util::check_error<mg::DTypeError>([&] { (void)F::cumsum(b, 0); }, {"cumsum", "uint8"});
  mg::autodiff::GradManager gm;
  mg::Tensor p = b.clone();
  test_util::check_error<mg::DTypeError>([&] { gm.attach(p); }, {"GradManager::attach", "uint8", "[2, 2]"});
  BOOST_TEST(gm.attached_tensors().empty());
  BOOST_TEST(ints<uint8_t>(p) == std::vector<int>({1, 2, 3, 4}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(indices_must_be_int64) {
  // As for int32: index tensors are int64 only (PyTorch's uint8 "byte mask"
  // indexing is deprecated there; convert with .to(DType::int64)).
  const mg::Tensor x = mg::tensor({1.f, 2.f, 3.f}, {3});
  const mg::Tensor w = mg::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  test_util::check_error<mg::DTypeError>([&] { (void)F::index_select(x, 0, u8({0, 2})); },
                                         {"index_select", "uint8[2]"});
  test_util::check_error<mg::DTypeError>([&] { (void)F::embedding(w, i8({1})); }, {"embedding", "int8[1]"});
  test_util::check_error<mg::DTypeError>([&] { (void)F::gather(x, 0, u8({1})); }, {"gather", "uint8[1]"});
  BOOST_TEST(F::index_select(x, 0, u8({0, 2}).to(DType::int64)).to_vector<float>() == std::vector<float>({1, 3}),
             boost::test_tools::per_element());
  // As data, int8 / uint8 tensors are picked like any other.
  const mg::Tensor idx = mg::tensor(std::vector<int64_t>{2, 0, 2}, {3});
  BOOST_TEST(ints<uint8_t>(F::index_select(u8({10, 20, 255}), 0, idx)) == std::vector<int>({255, 10, 255}),
             boost::test_tools::per_element());
  BOOST_TEST(ints<int8_t>(F::gather(i8({-1, 5, -128}), 0, idx)) == std::vector<int>({-128, -1, -128}),
             boost::test_tools::per_element());
  // Labels too: cross_entropy takes int32 / int64 classes, as PyTorch takes int64 only.
  test_util::check_error<mg::DTypeError>([&] { (void)F::cross_entropy(w, u8({0, 1})); },
                                         {"cross_entropy", "uint8[2]"});
}

BOOST_AUTO_TEST_CASE(gradients_flow_past_integer_operands) {
  // The uint8 operand is promoted (not tracked); the float32 weight gets its gradient.
  mg::Tensor w = mg::tensor({1.f, 1.f, 1.f}, {3});
  const mg::Tensor x = u8({2, 250, 0});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  {
    auto rec = gm.record();
    gm.backward(F::sum(F::mul(w, x)));
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>({2, 250, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(autocast_leaves_integer_tensors_alone) {
  mg::amp::autocast scope(true, DType::bfloat16);
  BOOST_TEST(F::add(u8({1}), u8({2})).dtype() == DType::uint8);
  BOOST_TEST(F::mul(i8({1}), i8({2})).dtype() == DType::int8);
  BOOST_TEST(F::max(u8({1, 9})).dtype() == DType::uint8);
  // ... while it does cast floating inputs of a lower-precision op.
  const mg::Tensor m = mg::tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  BOOST_TEST(F::matmul(m, m).dtype() == DType::bfloat16);
}

BOOST_AUTO_TEST_SUITE_END()
