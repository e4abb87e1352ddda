#include "data/idx_file.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mixgrad/error.hpp"

namespace mixgrad::data::idx {

namespace {

// gzread reads gzip and, transparently, uncompressed files.
std::vector<uint8_t> read_all(const std::string& path, const std::string& hint) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw IOError("cannot open " + path + ": no such file" + hint);
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw IOError("cannot open " + path + ": " + std::strerror(errno) + hint);
  std::vector<uint8_t> out;
  constexpr unsigned kChunk = 1u << 20;
  for (;;) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const int got = gzread(f, out.data() + old, kChunk);
    if (got < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      throw IOError(path + ": corrupt compressed data (" + msg + ")");
    }
    out.resize(old + static_cast<size_t>(got));
    if (got == 0) break;
  }
  // A gzip stream cut short reads as a clean end of data; zlib reports it
  // only through the error state.
  int err = Z_OK;
  const std::string msg = gzerror(f, &err);
  gzclose(f);
  if (err != Z_OK) throw IOError(path + ": truncated or corrupt compressed data (" + msg + ")");
  return out;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

UByteArray read_ubyte(const std::string& path, int ndim, const std::string& hint) {
  std::vector<uint8_t> bytes = read_all(path, hint);
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  if (bytes.size() < header)
    throw IOError(path + ": truncated header (" + std::to_string(bytes.size()) + " bytes, need " +
                  std::to_string(header) + ")");
  const uint32_t magic = big_endian_u32(bytes.data());
  const uint32_t want = 0x0800u | static_cast<uint32_t>(ndim);
  if (magic != want) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad magic number 0x%08x (expected 0x%08x", magic, want);
    throw IOError(path + ": " + buf + ", an unsigned-byte IDX file of " + std::to_string(ndim) + " dims)");
  }
  UByteArray out;
  uint64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    out.dims.push_back(big_endian_u32(bytes.data() + 4 + 4 * d));
    // A crafted header could make the count wrap around to the file's size.
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(out.dims.back()), &count))
      throw IOError(path + ": malformed header: the dimensions announce 2^64 values or more");
  }
  const uint64_t have = bytes.size() - header;
  if (have < count)
    throw IOError(path + ": truncated: the header announces " + std::to_string(count) + " values, the file holds " +
                  std::to_string(have));
  if (have > count)
    throw IOError(path + ": malformed: " + std::to_string(have - count) + " bytes after the " + std::to_string(count) +
                  " values the header announces");
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));
  out.values = std::move(bytes);
  return out;
}

}  // namespace mixgrad::data::idx
