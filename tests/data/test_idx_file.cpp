// The IDX reader on crafted files (gzip and plain) written to a temp
// directory: the header is checked before any data is read or allocated, and
// a decompression bomb fails after a bounded number of bytes, which
// idx::ReadStats makes observable without timing anything.
#include <boost/test/unit_test.hpp>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "data/idx_file.hpp"
#include "mixgrad/error.hpp"

namespace mg = mixgrad;
namespace idx = mixgrad::data::idx;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

void put_u32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

Bytes header(uint32_t magic, std::initializer_list<uint32_t> dims) {
  Bytes b;
  put_u32(b, magic);
  for (uint32_t d : dims) put_u32(b, d);
  return b;
}

// `b`, then `zeros` zero bytes, gzip-compressed into `p`.
void write_gz(const fs::path& p, const Bytes& b, uint64_t zeros = 0) {
  gzFile f = gzopen(p.string().c_str(), "wb9");
  BOOST_REQUIRE(f);
  if (!b.empty()) BOOST_REQUIRE(gzwrite(f, b.data(), static_cast<unsigned>(b.size())) == static_cast<int>(b.size()));
  const Bytes block(1 << 20, 0);
  for (uint64_t left = zeros; left > 0;) {
    const unsigned n = static_cast<unsigned>(std::min<uint64_t>(left, block.size()));
    BOOST_REQUIRE(gzwrite(f, block.data(), n) == static_cast<int>(n));
    left -= n;
  }
  BOOST_REQUIRE(gzclose(f) == Z_OK);
}

void write_plain(const fs::path& p, const Bytes& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("mixgrad_idx_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

// Runs `read` and checks it throws IOError whose message holds every one of `parts`.
template <class F>
void expect_io_error(F read, std::initializer_list<std::string> parts) {
  try {
    read();
    BOOST_FAIL("expected IOError");
  } catch (const mg::IOError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, "'" << p << "' not in: " << msg);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(idx_file)

BOOST_AUTO_TEST_CASE(reads_gzip_and_plain_files) {
  TempDir t;
  Bytes b = header(0x0803, {2, 3, 4});
  for (int i = 0; i < 24; ++i) b.push_back(static_cast<uint8_t>(i * 11));
  write_gz(t.file("a.gz"), b);
  write_plain(t.file("a"), b);
  for (const auto& name : {"a.gz", "a"}) {
    idx::ReadStats stats;
    const auto arr = idx::read_ubyte(t.file(name), 3, {.expected_dims = {-1, 3, 4}, .stats = &stats});
    BOOST_TEST(arr.dims == std::vector<int64_t>({2, 3, 4}), boost::test_tools::per_element());
    BOOST_REQUIRE(arr.values.size() == 24u);
    BOOST_TEST(arr.values[23] == (23 * 11) % 256);
    BOOST_TEST(stats.decompressed == 16u + 24u);
  }
  // A cap equal to the size is allowed, one byte less is not.
  BOOST_TEST(idx::read_ubyte(t.file("a.gz"), 3, {.max_bytes = 24}).values.size() == 24u);
  expect_io_error([&] { idx::read_ubyte(t.file("a.gz"), 3, {.max_bytes = 23}); },
                  {"a.gz", "2 x 3 x 4", "24 bytes, more than the limit of 23"});
}

// 256 MiB of zeros in a ~250 KiB gzip: the old reader inflated all of it
// before looking at the header.
BOOST_AUTO_TEST_CASE(zero_bomb_fails_after_a_few_kilobytes) {
  TempDir t;
  const auto path = t.file("bomb.gz");
  write_gz(path, {}, uint64_t{256} << 20);
  const auto file_size = fs::file_size(path);
  BOOST_REQUIRE(file_size > 200u * 1024);

  idx::ReadStats stats;
  expect_io_error([&] { idx::read_ubyte(path, 3, {.stats = &stats}); },
                  {"bomb.gz", "bad magic number 0x00000000", "unknown element type code 0x00"});
  BOOST_TEST(stats.decompressed == 4u);  // the magic number, nothing more
  BOOST_TEST(stats.compressed < 64u * 1024, "consumed " << stats.compressed << " of " << file_size << " bytes");

  // A valid header for 16 values, then the same zeros: the look past the
  // data is bounded too.
  const auto padded = t.file("padded.gz");
  Bytes b = header(0x0801, {16});
  b.resize(b.size() + 16, 7);
  write_gz(padded, b, uint64_t{256} << 20);
  stats = {};
  expect_io_error([&] { idx::read_ubyte(padded, 1, {.stats = &stats}); },
                  {"padded.gz", "malformed: at least 65536 bytes after the 16 values"});
  BOOST_TEST(stats.decompressed <= 8u + 16u + 65536u + 4096u);
  BOOST_TEST(stats.compressed < 128u * 1024, "consumed " << stats.compressed << " of " << fs::file_size(padded));
}

BOOST_AUTO_TEST_CASE(bad_magic_names_what_is_wrong) {
  TempDir t;
  const auto path = t.file("m.gz");
  auto read3 = [&] { idx::read_ubyte(path, 3); };
  write_gz(path, header(0x12340803, {1, 1, 1}));
  expect_io_error(read3, {"m.gz", "bad magic number 0x12340803 (expected 0x00000803", "not an IDX file"});
  write_gz(path, header(0x0D03, {1, 1, 1}));
  expect_io_error(read3, {"m.gz", "0x00000d03", "its values are float32, not unsigned bytes"});
  write_gz(path, header(0x0703, {1, 1, 1}));
  expect_io_error(read3, {"unknown element type code 0x07"});
  write_gz(path, header(0x0801, {1}));
  expect_io_error(read3, {"0x00000801", "it has 1 dims, not 3"});
}

BOOST_AUTO_TEST_CASE(truncated_files_fail) {
  TempDir t;
  const auto path = t.file("t.gz");
  Bytes b = header(0x0801, {100});
  b.resize(b.size() + 50, 1);
  write_gz(path, b);
  expect_io_error([&] { idx::read_ubyte(path, 1); },
                  {"t.gz", "truncated: the header announces 100 values, the file holds 50"});

  write_gz(path, Bytes{0, 0, 8, 3, 0, 0});
  expect_io_error([&] { idx::read_ubyte(path, 3); }, {"t.gz", "truncated header (6 bytes, need 16)"});

  // The gzip stream itself cut short, inside the data and inside the trailer.
  Bytes full = header(0x0801, {4000});
  for (int i = 0; i < 4000; ++i) full.push_back(static_cast<uint8_t>(i * 2654435761u >> 24));
  write_gz(path, full);
  const auto size = fs::file_size(path);
  fs::resize_file(path, size / 2);
  expect_io_error([&] { idx::read_ubyte(path, 1); }, {"t.gz", "truncated or corrupt compressed data"});
  write_gz(path, full);
  fs::resize_file(path, size - 3);
  expect_io_error([&] { idx::read_ubyte(path, 1); }, {"t.gz", "truncated or corrupt compressed data"});
}

BOOST_AUTO_TEST_CASE(huge_declared_dims_fail_before_reading_data) {
  TempDir t;
  const auto path = t.file("h.gz");
  Bytes b = header(0x0803, {60000, 60000, 60000});
  b.resize(b.size() + 1000, 0);
  write_gz(path, b);
  idx::ReadStats stats;
  expect_io_error([&] { idx::read_ubyte(path, 3, {.stats = &stats}); },
                  {"h.gz", "60000 x 60000 x 60000", "216000000000000 bytes, more than the limit of 1073741824"});
  BOOST_TEST(stats.decompressed == 16u);  // the header only

  // The expected extents are checked before the size.
  expect_io_error([&] { idx::read_ubyte(path, 3, {.expected_dims = {-1, 28, 28}}); },
                  {"h.gz", "extents 60000 x 60000 x 60000, expected any x 28 x 28"});
}

BOOST_AUTO_TEST_CASE(dims_product_overflow_fails) {
  TempDir t;
  const auto path = t.file("o.gz");
  write_gz(path, header(0x0803, {0xFFFFFFFFu, 0xFFFFFFFFu, 0x10u}));
  expect_io_error([&] { idx::read_ubyte(path, 3); },
                  {"o.gz", "4294967295 x 4294967295 x 16", "product overflows 64 bits"});
}

BOOST_AUTO_TEST_CASE(trailing_bytes_and_corrupt_checksum_fail) {
  TempDir t;
  const auto path = t.file("x.gz");
  Bytes b = header(0x0801, {3});
  b.insert(b.end(), {1, 2, 3, 4, 5});
  write_gz(path, b);
  expect_io_error([&] { idx::read_ubyte(path, 1); }, {"x.gz", "malformed: 2 bytes after the 3 values"});

  // Flip a bit of the CRC-32 in the gzip trailer.
  b.resize(b.size() - 2);
  write_gz(path, b);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-8, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 1);
    f.seekp(-8, std::ios::end);
    f.put(c);
  }
  expect_io_error([&] { idx::read_ubyte(path, 1); }, {"x.gz", "truncated or corrupt compressed data"});
}

BOOST_AUTO_TEST_CASE(missing_file_carries_the_hint) {
  TempDir t;
  expect_io_error([&] { idx::read_ubyte(t.file("none.gz"), 1, {.hint = "; try X"}); },
                  {"cannot open", "none.gz", "no such file; try X"});
}

BOOST_AUTO_TEST_SUITE_END()
