// Helpers of the io suite: byte-level access to tensors and hand-built
// safetensors images, independent of the writer under test.
#pragma once

#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace io_test {

namespace mg = mixgrad;

/// The bytes of a tensor's elements (contiguous, host).
inline std::vector<std::byte> bytes_of(const mg::Tensor& t) {
  const mg::Tensor c = t.to(mg::Device::cpu()).contiguous();
  const auto* p = static_cast<const std::byte*>(c.raw_data());
  return {p, p + c.numel() * mg::element_size(c.dtype())};
}

/// A safetensors image from a header text and data bytes, built by hand:
/// the length prefix is written here, not by the code under test.
inline std::vector<std::byte> build(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<std::byte> out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xff));
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  for (uint8_t b : data) out.push_back(static_cast<std::byte>(b));
  return out;
}

inline std::vector<std::byte> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

inline void write_all(const std::filesystem::path& p, const std::vector<std::byte>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// True when `f` throws IOError whose message contains every one of `parts`
/// (each failure is reported with the message).
template <class F>
bool throws_io_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const mg::IOError& e) {
    const std::string msg = e.what();
    bool ok = true;
    for (const auto& p : parts)
      if (msg.find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("message lacks '" << p << "': " << msg);
        ok = false;
      }
    if (!ok) BOOST_ERROR("IOError message: " << msg);
    return ok;
  } catch (const std::exception& e) {
    BOOST_ERROR("expected IOError, got: " << e.what());
    return false;
  }
  BOOST_ERROR("expected IOError, nothing was thrown");
  return false;
}

/// A fresh, empty directory under the temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("mixgrad_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace io_test
