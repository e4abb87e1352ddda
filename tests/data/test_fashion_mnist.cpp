// FashionMNIST reading: small IDX files written here to a temp directory
// (good ones and broken ones), plus the real files when installed.
#include <boost/test/unit_test.hpp>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

void put_u32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

Bytes idx_images(uint32_t n, uint32_t rows = 28, uint32_t cols = 28, uint32_t magic = 0x803) {
  Bytes b;
  put_u32(b, magic);
  put_u32(b, n);
  put_u32(b, rows);
  put_u32(b, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) b.push_back(static_cast<uint8_t>((i * 7 + i / 784) % 256));
  return b;
}

Bytes idx_labels(uint32_t n, uint8_t first = 0) {
  Bytes b;
  put_u32(b, 0x801);
  put_u32(b, n);
  for (uint32_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>((first + i) % 10));
  return b;
}

void write_gz(const fs::path& p, const Bytes& b) {
  gzFile f = gzopen(p.string().c_str(), "wb");
  BOOST_REQUIRE(f);
  BOOST_REQUIRE(gzwrite(f, b.data(), static_cast<unsigned>(b.size())) == static_cast<int>(b.size()));
  gzclose(f);
}

// A fresh directory with a valid train split of 5 images and a test split of 3.
struct TempData {
  fs::path dir;
  TempData() {
    dir = fs::temp_directory_path() / ("mixgrad_fmnist_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    write_gz(dir / "train-images-idx3-ubyte.gz", idx_images(5));
    write_gz(dir / "train-labels-idx1-ubyte.gz", idx_labels(5));
    write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_images(3));
    write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_labels(3, 7));
  }
  ~TempData() { fs::remove_all(dir); }
  std::string root() const { return dir.string(); }
};

// Runs `load` and checks it throws IOError whose message holds every one of `parts`.
template <class F>
void expect_io_error(F load, std::initializer_list<std::string> parts) {
  try {
    load();
    BOOST_FAIL("expected IOError");
  } catch (const mg::IOError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, "'" << p << "' not in: " << msg);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fashion_mnist)

BOOST_AUTO_TEST_CASE(reads_and_normalises_small_files) {
  TempData d;
  mg::data::FashionMNIST train(d.root());
  BOOST_TEST(train.size() == 5);
  BOOST_TEST(train.images().shape() == mg::Shape({5, 1, 28, 28}));
  BOOST_TEST(train.images().dtype() == mg::DType::float32);
  BOOST_TEST(train.labels().dtype() == mg::DType::int64);
  BOOST_TEST(train.labels().to_vector<int64_t>() == std::vector<int64_t>({0, 1, 2, 3, 4}),
             boost::test_tools::per_element());
  // pixel (image 1, row 0, col 3) is byte index 784 + 3 -> (787 * 7 + 1) % 256
  const double byte = (787 * 7 + 1) % 256;
  BOOST_TEST(train.images().at<float>({1, 0, 0, 3}) == (byte / 255 - 0.2860) / 0.3530, boost::test_tools::tolerance(1e-5));

  mg::data::FashionMNIST raw(d.root(), mg::data::Split::train, {.normalize = false});
  BOOST_TEST(raw.images().at<float>({1, 0, 0, 3}) == byte / 255, boost::test_tools::tolerance(1e-6));

  mg::data::FashionMNIST test(d.root(), mg::data::Split::test);
  BOOST_TEST(test.size() == 3);
  BOOST_TEST(test.labels().to_vector<int64_t>() == std::vector<int64_t>({7, 8, 9}), boost::test_tools::per_element());
  BOOST_TEST(mg::data::FashionMNIST::kClassNames[9] == "Ankle boot");
}

BOOST_AUTO_TEST_CASE(uint8_images_are_the_raw_bytes) {
  TempData d;
  mg::data::FashionMNIST raw(d.root(), mg::data::Split::train, {.dtype = mg::DType::uint8});
  const mg::Tensor x = raw.images();
  BOOST_TEST(x.dtype() == mg::DType::uint8);
  BOOST_TEST(x.shape() == mg::Shape({5, 1, 28, 28}));
  BOOST_TEST(raw.labels().dtype() == mg::DType::int64);
  // Every byte as written by idx_images, normalisation ignored.
  const uint8_t* p = x.data<uint8_t>();
  for (uint32_t i = 0; i < 5 * 784; ++i) BOOST_TEST_REQUIRE(p[i] == static_cast<uint8_t>((i * 7 + i / 784) % 256));
  BOOST_TEST(x.at<int>({1, 0, 0, 3}) == (787 * 7 + 1) % 256);
  // The tensor keeps the bytes alive after its dataset is gone.
  mg::Tensor kept;
  {
    mg::data::FashionMNIST other(d.root(), mg::data::Split::train, {.dtype = mg::DType::uint8});
    kept = other.images();
  }
  BOOST_TEST(kept.at<int>({4, 0, 27, 27}) == (static_cast<int>(5 * 784 - 1) * 7 + 4) % 256);

  // Batches keep the dtype: convert on the fly (x.to(float32) / 255), as with torchvision's ToTensor.
  mg::data::DataLoader loader(raw, {.batch_size = 2});
  int batches = 0;
  for (const auto& [bx, by] : loader) {
    BOOST_TEST(bx.dtype() == mg::DType::uint8);
    BOOST_TEST(by.dtype() == mg::DType::int64);
    if (batches == 0) {
      BOOST_TEST(bx.shape() == mg::Shape({2, 1, 28, 28}));
      BOOST_TEST(bx.at<int>({1, 0, 0, 3}) == (787 * 7 + 1) % 256);
    }
    ++batches;
  }
  BOOST_TEST(batches == 3);

  // Other floating dtypes hold the float32 values converted.
  mg::data::FashionMNIST f64(d.root(), mg::data::Split::train, {.normalize = false, .dtype = mg::DType::float64});
  BOOST_TEST(f64.images().dtype() == mg::DType::float64);
  BOOST_TEST(f64.images().at<double>({1, 0, 0, 3}) == ((787 * 7 + 1) % 256) / 255.0, boost::test_tools::tolerance(1e-6));

  // The uint8 pixels convert to the float path's values.
  mg::data::FashionMNIST f32(d.root(), mg::data::Split::train, {.normalize = false});
  const auto a = mg::F::div(x.to(mg::DType::float32), 255.0).to_vector<float>();
  const auto b = f32.images().to_vector<float>();
  BOOST_TEST(a == b, boost::test_tools::tolerance(1e-6f) << boost::test_tools::per_element());

  for (mg::DType bad : {mg::DType::int8, mg::DType::int32, mg::DType::int64, mg::DType::bool_})
    BOOST_CHECK_EXCEPTION(mg::data::FashionMNIST(d.root(), mg::data::Split::train, {.dtype = bad}), mg::DTypeError,
                          [&](const mg::DTypeError& e) {
                            const std::string m = e.what();
                            return m.find("FashionMNIST") != std::string::npos &&
                                   m.find(std::string(mg::to_string(bad))) != std::string::npos;
                          });
}

BOOST_AUTO_TEST_CASE(missing_files_say_how_to_install) {
  TempData d;
  fs::remove(d.dir / "t10k-labels-idx1-ubyte.gz");
  expect_io_error([&] { mg::data::FashionMNIST(d.root(), mg::data::Split::test); },
                  {"t10k-labels-idx1-ubyte.gz", "apt-get install dataset-fashion-mnist"});
  expect_io_error([&] { mg::data::FashionMNIST((d.dir / "nowhere").string()); },
                  {"nowhere/train-images-idx3-ubyte.gz", "apt-get install dataset-fashion-mnist"});
}

BOOST_AUTO_TEST_CASE(malformed_files_name_the_problem) {
  TempData d;
  const auto images = d.dir / "train-images-idx3-ubyte.gz";
  const auto labels = d.dir / "train-labels-idx1-ubyte.gz";
  auto load = [&] { mg::data::FashionMNIST ds(d.root()); };

  write_gz(images, idx_images(5, 28, 28, 0x801));
  expect_io_error(load, {"train-images-idx3-ubyte.gz", "bad magic number 0x00000801"});

  Bytes truncated = idx_images(5);
  truncated.resize(truncated.size() - 100);
  write_gz(images, truncated);
  expect_io_error(load, {"train-images-idx3-ubyte.gz", "truncated", "3920"});

  Bytes longer = idx_images(5);
  longer.push_back(0);
  write_gz(images, longer);
  expect_io_error(load, {"1 bytes after"});

  write_gz(images, Bytes{0, 0, 8});
  expect_io_error(load, {"truncated header"});

  write_gz(images, idx_images(5, 32, 32));
  expect_io_error(load, {"train-images-idx3-ubyte.gz", "extents 5 x 32 x 32, expected any x 28 x 28"});

  write_gz(images, idx_images(5));
  write_gz(labels, idx_labels(4));
  expect_io_error(load, {"5 images", "4 labels"});

  Bytes bad_label = idx_labels(5);
  bad_label.back() = 12;
  write_gz(labels, bad_label);
  expect_io_error(load, {"label 12", "sample 4"});

  // Extents whose product is 2^64: the count used to wrap to 0 and match an empty body.
  write_gz(labels, idx_labels(5));
  write_gz(images, idx_images(1u << 22, 1u << 22, 1u << 20));
  expect_io_error(load, {"train-images-idx3-ubyte.gz", "the header announces extents"});

  // A gzip stream cut in the middle.
  write_gz(labels, idx_labels(5));
  write_gz(images, idx_images(5));
  const auto size = fs::file_size(images);
  fs::resize_file(images, size / 2);
  expect_io_error(load, {"train-images-idx3-ubyte.gz", "compressed data"});
}

BOOST_AUTO_TEST_CASE(real_dataset_when_installed) {
  if (!fs::exists(std::string(mg::data::FashionMNIST::kDefaultRoot) + "/t10k-images-idx3-ubyte.gz")) {
    BOOST_TEST_MESSAGE("Fashion-MNIST not installed; skipping");
    return;
  }
  mg::data::FashionMNIST test(mg::data::Split::test);
  BOOST_TEST(test.size() == 10000);
  std::vector<int> per_class(10, 0);
  for (int64_t y : test.labels().to_vector<int64_t>()) ++per_class[y];
  for (int c : per_class) BOOST_TEST(c == 1000);
  // The default normalisation centres the pixels (the statistics are the
  // training set's; the test set's are close).
  const auto v = test.images().to_vector<double>();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) sq += (x - mean) * (x - mean);
  BOOST_TEST(std::abs(mean) < 0.02);
  BOOST_TEST(std::abs(std::sqrt(sq / v.size()) - 1.0) < 0.02);

  mg::data::FashionMNIST raw(mg::data::Split::test, {.dtype = mg::DType::uint8});
  BOOST_TEST(raw.images().dtype() == mg::DType::uint8);
  BOOST_TEST(raw.images().shape() == mg::Shape({10000, 1, 28, 28}));
  // The same pixels: (x / 255 - mean) / std of the raw bytes is the default path's value.
  const uint8_t* p = raw.images().data<uint8_t>();
  int64_t mismatches = 0;
  for (size_t i = 0; i < v.size(); i += 97)
    mismatches += std::abs((p[i] / 255.0 - 0.2860) / 0.3530 - v[i]) > 1e-5;
  BOOST_TEST(mismatches == 0);
}

BOOST_AUTO_TEST_SUITE_END()
