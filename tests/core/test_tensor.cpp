#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;

BOOST_AUTO_TEST_CASE(factories_and_element_access) {
  auto x = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  BOOST_TEST(x.shape() == mg::Shape({2, 3}));
  BOOST_TEST(x.dtype() == mg::DType::float32);
  BOOST_TEST(x.at<float>({1, 2}) == 6.f);
  BOOST_TEST(mg::zeros({3}).to_vector<float>() == std::vector<float>({0, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(mg::full({2}, 2.5, mg::DType::float64).to_vector<double>() == std::vector<double>({2.5, 2.5}),
             boost::test_tools::per_element());
  BOOST_TEST(mg::arange(5).to_vector<int64_t>() == std::vector<int64_t>({0, 1, 2, 3, 4}),
             boost::test_tools::per_element());
  BOOST_TEST(mg::scalar(3.0).item<float>() == 3.f);
  BOOST_CHECK_THROW(mg::tensor({1.f, 2.f}, {3}), mg::ShapeError);
  BOOST_CHECK_THROW(x.item<float>(), mg::ShapeError);
  BOOST_CHECK_THROW(x.data<double>(), mg::DTypeError);
}

// full() writes through the backend's fill, which takes memset for a value
// whose bytes are all zero and the stored bits for the 16-bit floats: -0.0
// must keep its sign, and a non-zero value must land in every element of
// an odd length (vector loops and their tails).
BOOST_AUTO_TEST_CASE(full_writes_every_element_with_its_sign_in_every_dtype) {
  for (const mg::DType dt : {mg::DType::float64, mg::DType::float32, mg::DType::float16, mg::DType::bfloat16})
    for (const double v : {0.0, -0.0, 1.5, -2.25})
      for (const int64_t n : {1, 67, 1000}) {
        const std::vector<double> got = mg::full({n}, v, dt).to(mg::DType::float64).to_vector<double>();
        const bool all = std::all_of(got.begin(), got.end(),
                                     [&](double g) { return g == v && std::signbit(g) == std::signbit(v); });
        BOOST_TEST(all, dt << " full(" << n << ", " << v << ")");
      }
  for (const double v : {0.0, 7.0}) {
    const std::vector<int64_t> got = mg::full({33}, v, mg::DType::int64).to_vector<int64_t>();
    BOOST_TEST(std::count(got.begin(), got.end(), static_cast<int64_t>(v)) == 33);
  }
}

BOOST_AUTO_TEST_CASE(storage_is_aligned_and_shared_by_views) {
  auto x = mg::arange(0.0, 24.0, 1.0);
  BOOST_TEST(reinterpret_cast<uintptr_t>(x.raw_data()) % 64 == 0);
  auto v = x.reshape({2, 3, 4});
  BOOST_TEST(v.raw_data() == x.raw_data());
  auto n = v.narrow(1, 1, 2);
  BOOST_TEST(n.shape() == mg::Shape({2, 2, 4}));
  BOOST_TEST(!n.is_contiguous());
  BOOST_TEST(n.at<float>({1, 0, 3}) == 12.f + 4.f + 3.f);
  auto c = n.contiguous();
  BOOST_TEST(c.is_contiguous());
  BOOST_TEST(c.to_vector<float>()[8] == 16.f);
  x.data<float>()[5] = 100.f;  // views see writes to the storage
  BOOST_TEST(n.at<float>({0, 0, 1}) == 100.f);
  BOOST_TEST(mg::F::flatten(v, 1).shape() == mg::Shape({2, 12}));
  BOOST_TEST(mg::F::transpose(v, 0, 2).shape() == mg::Shape({4, 3, 2}));
  BOOST_TEST(mg::F::transpose(v, 0, 2).at<float>({3, 2, 1}) == v.at<float>({1, 2, 3}));
  BOOST_CHECK_THROW(x.reshape({5, 5}), mg::ShapeError);
  BOOST_CHECK_THROW(x.narrow(0, 20, 10), mg::ShapeError);
}

BOOST_AUTO_TEST_CASE(dtype_conversion_round_trips) {
  auto x = mg::tensor({0.1f, -2.5f, 65504.f, 1e-8f}, {4});
  auto h = x.to(mg::DType::float16);
  BOOST_TEST(h.dtype() == mg::DType::float16);
  auto back = h.to(mg::DType::float32).to_vector<float>();
  BOOST_TEST(back[1] == -2.5f);
  BOOST_TEST(back[2] == 65504.f);
  BOOST_TEST(std::abs(back[0] - 0.1f) < 1e-4f);
  auto b = x.to(mg::DType::bfloat16).to(mg::DType::float32).to_vector<float>();
  BOOST_TEST(std::abs(b[0] - 0.1f) < 1e-3f);
  auto i = mg::tensor({1.7, -2.2}, {2}).to(mg::DType::int32).to_vector<int32_t>();
  BOOST_TEST(i[0] == 1);
  BOOST_TEST(i[1] == -2);
}

BOOST_AUTO_TEST_CASE(random_is_seeded_and_plausible) {
  mg::manual_seed(42);
  auto a = mg::normal({10000}, 1.0, 2.0);
  mg::manual_seed(42);
  auto b = mg::normal({10000}, 1.0, 2.0);
  BOOST_TEST(a.to_vector<float>() == b.to_vector<float>(), boost::test_tools::per_element());
  auto v = a.to_vector<double>();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / v.size());
  BOOST_TEST(std::abs(mean - 1.0) < 0.1);
  BOOST_TEST(std::abs(sd - 2.0) < 0.1);
  auto u = mg::uniform({10000}, -1, 3).to_vector<float>();
  BOOST_TEST(*std::min_element(u.begin(), u.end()) >= -1.f);
  BOOST_TEST(*std::max_element(u.begin(), u.end()) < 3.f);
}

BOOST_AUTO_TEST_CASE(printing_names_shape_and_dtype) {
  std::ostringstream os;
  os << mg::tensor({1.f, 2.f}, {1, 2});
  BOOST_TEST(os.str().find("shape=[1, 2]") != std::string::npos);
  BOOST_TEST(os.str().find("float32") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(parse_device_reads_what_to_string_writes_and_nothing_else) {
  BOOST_TEST((mg::parse_device("cpu") == mg::Device::cpu()));
  BOOST_TEST((mg::parse_device("cuda") == mg::Device::cuda(0)));
  BOOST_TEST((mg::parse_device("cuda:3") == mg::Device::cuda(3)));
  for (const mg::Device d : {mg::Device::cpu(), mg::Device::cuda(0), mg::Device::cuda(12)})
    BOOST_TEST((mg::parse_device(mg::to_string(d)) == d));
  for (const char* bad : {"gpu", "", "CPU", " cuda", "cuda:", "cuda:-1", "cuda:+1", "cuda:0x1", "cuda:1 ", "cuda0",
                          "cuda:99999999999"}) {
    try {
      (void)mg::parse_device(bad);
      BOOST_ERROR("parse_device accepted '" << bad << "'");
    } catch (const mg::ValueError& e) {
      BOOST_TEST(std::string(e.what()).find("'" + std::string(bad) + "'") != std::string::npos, e.what());
    }
  }
}
