// Reading IDX files (the MNIST family's format), plain or gzip-compressed:
// a big-endian header {0, 0, type, ndim} then ndim uint32 extents, then the
// elements in row-major order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mixgrad::data::idx {

struct UByteArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> values;
};

/// Reads an unsigned-byte IDX file with `ndim` dimensions. Throws IOError
/// naming `path` for a missing or unreadable file, a corrupt gzip stream, a
/// wrong magic number, or a data size that does not match the header.
/// `hint` is appended to the message for a missing file.
UByteArray read_ubyte(const std::string& path, int ndim, const std::string& hint);

}  // namespace mixgrad::data::idx
