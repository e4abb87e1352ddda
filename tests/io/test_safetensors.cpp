// The safetensors reader and writer: round trips of every dtype, the
// layout against hand-built files, and every malformed input the reader
// must refuse with an IOError that says what is wrong.
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>

#include "io/io_test_util.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
using io_test::build;
using io_test::bytes_of;
using io_test::throws_io_error;

namespace {

// One tensor of each dtype, with values chosen here (not by the writer).
mg::StateDict every_dtype() {
  mg::StateDict sd;
  sd.insert("f32", mg::tensor({1.5, -2.25, 3.0e-8, 65504.0, -0.0, 7.0}, {2, 3}, mg::DType::float32));
  sd.insert("f16", mg::tensor({1.0, -2.0, 0.5, 6.1035156e-05}, {4}, mg::DType::float16));
  sd.insert("bf16", mg::tensor({1.0, -3.0, 0.15625, 1.0e30}, {2, 2}, mg::DType::bfloat16));
  sd.insert("f64", mg::tensor({0.1, -1.0e300, 5.0e-324}, {3, 1}, mg::DType::float64));
  sd.insert("i32", mg::tensor<int32_t>({-2147483647 - 1, 0, 2147483647}, {3}));
  sd.insert("i64", mg::tensor<int64_t>({int64_t{1} << 40, -7}, {1, 2}));
  sd.insert("bool", mg::tensor<bool>({true, false, true}, {3}));
  sd.insert("i8", mg::tensor<int8_t>({-128, -1, 0, 127}, {2, 2}));
  sd.insert("u8", mg::tensor<uint8_t>({0, 1, 128, 255}, {4}));
  sd.insert("scalar", mg::scalar(42.0, mg::DType::float64));
  sd.insert("empty", mg::zeros({0, 4}));
  return sd;
}

std::vector<uint8_t> le32(uint32_t v) { return {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)}; }

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors)

BOOST_AUTO_TEST_CASE(round_trip_every_dtype_in_memory_and_on_disk) {
  const mg::StateDict sd = every_dtype();
  io_test::TempDir dir;
  const auto path = dir.path / "all.safetensors";
  mg::io::save_file(sd, path, {{"note", "hello"}});
  const auto file_bytes = io_test::read_all(path);
  BOOST_TEST((file_bytes == mg::io::save_bytes(sd, {{"note", "hello"}})));

  mg::io::Metadata meta_file, meta_mem;
  const mg::StateDict from_file = mg::io::load_file(path, &meta_file);
  const mg::StateDict from_mem = mg::io::load_bytes(file_bytes, &meta_mem);
  for (const mg::StateDict* loaded : {&from_file, &from_mem}) {
    BOOST_TEST(loaded->keys() == sd.keys(), boost::test_tools::per_element());
    for (const auto& [name, t] : sd) {
      const mg::Tensor& u = loaded->at(name);
      BOOST_TEST_CONTEXT(name) {
        BOOST_TEST(u.dtype() == t.dtype());
        BOOST_TEST(u.shape() == t.shape());
        BOOST_TEST((bytes_of(u) == bytes_of(t)));
      }
    }
  }
  BOOST_TEST(meta_file.at("note") == "hello");
  BOOST_TEST(meta_file.at(std::string(mg::io::kChecksumKey)).size() == 8u);
  BOOST_TEST((meta_file == meta_mem));
  BOOST_TEST((mg::io::load_metadata(path) == meta_file));
  // No temporary left next to the file.
  BOOST_TEST(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 1);
}

// The safetensors names of the 1-byte integers, and their bytes as stored.
BOOST_AUTO_TEST_CASE(int8_and_uint8_are_I8_and_U8) {
  mg::StateDict sd;
  sd.insert("a", mg::tensor<int8_t>({-2, 3}, {2}));
  sd.insert("b", mg::tensor<uint8_t>({255}, {1}));
  const std::vector<std::byte> file = mg::io::save_bytes(sd);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  const auto header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(file.data()) + 8, n));
  BOOST_TEST(header["a"]["dtype"] == "I8");
  BOOST_TEST(header["a"]["data_offsets"] == nlohmann::json({0, 2}));
  BOOST_TEST(header["b"]["dtype"] == "U8");
  BOOST_TEST(header["b"]["data_offsets"] == nlohmann::json({2, 3}));
  BOOST_TEST_REQUIRE(file.size() == 8 + n + 3);
  BOOST_TEST(static_cast<int>(file[file.size() - 3]) == 0xfe);  // -2 as a byte
  BOOST_TEST(static_cast<int>(file[file.size() - 2]) == 3);
  BOOST_TEST(static_cast<int>(file[file.size() - 1]) == 255);
  const mg::StateDict back = mg::io::load_bytes(file);
  BOOST_TEST(back.at("a").dtype() == mg::DType::int8);
  BOOST_TEST(back.at("b").dtype() == mg::DType::uint8);
  BOOST_TEST(back.at("a").to_vector<int>() == std::vector<int>({-2, 3}), boost::test_tools::per_element());
  BOOST_TEST(back.at("b").item<int>() == 255);
}

BOOST_AUTO_TEST_CASE(layout_is_the_safetensors_one) {
  mg::StateDict sd;
  sd.insert("b", mg::tensor({1.0, 2.0}, {2}, mg::DType::float32));
  sd.insert("a", mg::tensor<int64_t>({5}, {1}));
  sd.insert("view", mg::arange(0.0, 6.0, 1.0).reshape({2, 3}).narrow(1, 1, 2));  // non-contiguous
  const auto bytes = mg::io::save_bytes(sd);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  BOOST_TEST(n % 8 == 0u);
  BOOST_TEST(bytes.size() == 8 + n + 8 + 8 + 16);
  const auto header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, n));
  BOOST_TEST(header["b"]["dtype"] == "F32");
  BOOST_TEST(header["b"]["shape"] == nlohmann::json({2}));
  BOOST_TEST(header["b"]["data_offsets"] == nlohmann::json({0, 8}));
  BOOST_TEST(header["a"]["dtype"] == "I64");
  BOOST_TEST(header["a"]["data_offsets"] == nlohmann::json({8, 16}));
  BOOST_TEST(header["view"]["shape"] == nlohmann::json({2, 2}));
  BOOST_TEST(header["view"]["data_offsets"] == nlohmann::json({16, 32}));
  BOOST_TEST(header["__metadata__"].contains(std::string(mg::io::kChecksumKey)));
  float view[4];
  std::memcpy(view, bytes.data() + 8 + n + 16, 16);
  BOOST_TEST(view[0] == 1.f);
  BOOST_TEST(view[1] == 2.f);
  BOOST_TEST(view[2] == 4.f);
  BOOST_TEST(view[3] == 5.f);
}

BOOST_AUTO_TEST_CASE(reads_a_hand_built_file_without_checksum) {
  // What another tool writes: no mixgrad metadata, tensors out of name order.
  std::vector<uint8_t> data = le32(7);
  for (uint8_t b : le32(0x3f800000)) data.push_back(b);  // 1.0f
  for (uint8_t b : le32(0xc0000000)) data.push_back(b);  // -2.0f
  const auto bytes = build(R"({"z":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                           R"("a":{"shape":[2],"dtype":"F32","data_offsets":[4,12]}})",
                           data);
  mg::io::Metadata meta;
  const auto sd = mg::io::load_bytes(bytes, &meta);
  BOOST_TEST(meta.empty());
  BOOST_TEST(sd.keys() == (std::vector<std::string>{"z", "a"}), boost::test_tools::per_element());
  BOOST_TEST(sd.at("z").item<int64_t>() == 7);
  BOOST_TEST(sd.at("z").ndim() == 0);
  BOOST_TEST(sd.at("a").to_vector<float>() == (std::vector<float>{1.f, -2.f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(writer_refuses_bad_names) {
  mg::StateDict sd;
  sd.insert("", mg::zeros({1}));
  BOOST_CHECK_THROW(mg::io::save_bytes(sd), mg::ValueError);
  mg::StateDict ok;
  ok.insert("x", mg::zeros({1}));
  BOOST_CHECK_THROW(mg::io::save_bytes(ok, {{std::string(mg::io::kChecksumKey), "0"}}), mg::ValueError);
  io_test::TempDir dir;
  BOOST_TEST(throws_io_error([&] { mg::io::save_file(ok, dir.path / "missing" / "x.safetensors"); },
                             {"missing/x.safetensors"}));
}

BOOST_AUTO_TEST_CASE(save_replaces_atomically) {
  io_test::TempDir dir;
  const auto path = dir.path / "x.safetensors";
  mg::StateDict one, two;
  one.insert("x", mg::ones({3}));
  two.insert("y", mg::zeros({5}));
  mg::io::save_file(one, path);
  mg::io::save_file(two, path);
  BOOST_TEST(mg::io::load_file(path).keys() == std::vector<std::string>{"y"}, boost::test_tools::per_element());
  BOOST_TEST(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 1);
}

BOOST_AUTO_TEST_CASE(missing_file_and_directory) {
  io_test::TempDir dir;
  BOOST_TEST(throws_io_error([&] { mg::io::load_file(dir.path / "nope.safetensors"); }, {"nope.safetensors"}));
  BOOST_TEST(throws_io_error([&] { mg::io::load_file(dir.path); }, {"not a regular file"}));
}

BOOST_AUTO_TEST_CASE(truncated_and_corrupt_files) {
  mg::StateDict sd = every_dtype();
  const auto good = mg::io::save_bytes(sd);
  // Every truncation point is refused, none crashes.
  for (size_t cut = 0; cut < good.size(); cut += (cut < 64 ? 1 : 13)) {
    const std::vector<std::byte> part(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
    BOOST_CHECK_THROW(mg::io::load_bytes(part), mg::IOError);
  }
  // Cut inside the data: the message says which tensor runs past the end.
  auto cut = good;
  cut.resize(good.size() - 3);
  BOOST_TEST(throws_io_error([&] { mg::io::load_bytes(cut, nullptr, "cut.st"); }, {"cut.st", "truncated", "'scalar'"}));
  // One flipped data bit: the checksum catches it.
  auto flipped = good;
  flipped.back() ^= std::byte{0x10};
  BOOST_TEST(throws_io_error([&] { mg::io::load_bytes(flipped, nullptr, "f.st"); }, {"f.st", "checksum mismatch"}));
  // Trailing bytes.
  auto longer = good;
  longer.push_back(std::byte{0});
  BOOST_TEST(throws_io_error([&] { mg::io::load_bytes(longer); }, {"trailing"}));
}

BOOST_AUTO_TEST_CASE(header_length_checked_before_reading) {
  BOOST_TEST(throws_io_error([] { mg::io::load_bytes(build("")); }, {"cannot hold a JSON object"}));
  auto huge = build("{}");
  huge[5] = std::byte{1};  // 2^40 bytes
  BOOST_TEST(throws_io_error([&] { mg::io::load_bytes(huge); }, {"exceeds the limit"}));
  auto longer = build("{}");
  longer[0] = std::byte{200};
  BOOST_TEST(throws_io_error([&] { mg::io::load_bytes(longer); }, {"header length 200", "truncated"}));
  const std::vector<std::byte> seven(7);
  BOOST_TEST(throws_io_error([&] { mg::io::load_bytes(seven); }, {"too short"}));
}

BOOST_AUTO_TEST_CASE(malformed_headers) {
  const std::vector<uint8_t> d8(8, 0);
  struct Case {
    std::string header;
    std::vector<uint8_t> data;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"{not json", {}, {"not valid JSON"}},
      {"[1,2]", {}, {"must be a JSON object"}},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", {0, 0, 0}, {"'x'", "truncated"}},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", d8, {"'x'", "needs 8 bytes", "span 16"}},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d8, {"'x'", "end before they begin"}},
      {R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
       d8, {"overlaps"}},
      {R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8, {"gap", "'x'"}},
      {R"({"x":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}})", d8, {"'x'", "'I16' is not supported"}},
      {R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8, {"'x'", "non-negative integers"}},
      {R"({"x":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8, {"'x'", "non-negative integers"}},
      {R"({"x":{"dtype":"F32","shape":[4611686018427387904,4611686018427387904],"data_offsets":[0,8]}})", d8,
       {"'x'", "too large"}},
      {R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", d8, {"'x'", "dimensions"}},
      {R"({"x":{"dtype":"F32","shape":[2]}})", d8, {"'x'", "data_offsets"}},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", d8, {"'x'", "unknown field 'extra'"}},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8, {"'x'", "[begin, end]"}},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":1}})", d8, {"'k' is not a string"}},
      {R"({"x":{"dtype":"F32","shape":[[[2]]],"data_offsets":[0,8]}})", d8, {"nests JSON deeper"}},
      {R"({"x":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}})", {0, 1, 2, 0, 0, 0, 0, 0}, {"'x'", "byte 2"}},
      {R"({"x":7})", {}, {"'x'", "must be an object"}},
      {R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       d8, {"'x' twice"}},
      {R"({"x":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", d8, {"'dtype' twice"}},
  };
  for (const Case& c : cases)
    BOOST_TEST_CONTEXT(c.header) {
      BOOST_TEST(throws_io_error([&] { mg::io::load_bytes(build(c.header, c.data), nullptr, "h.st"); }, c.message));
    }
}

BOOST_AUTO_TEST_SUITE_END()
