// Reading IDX files (the MNIST family's format), plain or gzip-compressed:
// a big-endian header {0, 0, type, ndim} then ndim uint32 extents, then the
// elements in row-major order.
//
// The header is read and checked before any data: the magic number, the
// element type, the extents against what the caller expects, and the size they
// announce against a cap. Then exactly that many bytes are allocated and read,
// so a small compressed file that inflates to gigabytes (or announces them)
// fails after a few kilobytes instead of filling memory.
//
//   idx::ReadStats stats;
//   auto images = idx::read_ubyte(path, 3, {.expected_dims = {-1, 28, 28}, .stats = &stats});
//   // images.dims = {n, 28, 28}, images.values holds n * 784 bytes
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mixgrad::data::idx {

struct UByteArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> values;
};

/// The largest data section a file may announce unless ReadOptions says
/// otherwise: 1 GiB, twenty times the Fashion-MNIST training images.
inline constexpr uint64_t kDefaultMaxBytes = uint64_t{1} << 30;

/// How much of a file a read consumed, updated as it goes, so that it is also
/// meaningful after the read threw.
struct ReadStats {
  uint64_t decompressed = 0;  ///< bytes taken from the (decompressed) stream
  uint64_t compressed = 0;    ///< bytes of the file itself consumed, read-ahead included
};

struct ReadOptions {
  /// The extents the caller expects, -1 for any; empty accepts any (but
  /// then holds `ndim` entries).
  std::vector<int64_t> expected_dims = {};
  /// The most bytes of values the header may announce.
  uint64_t max_bytes = kDefaultMaxBytes;
  /// Appended to the message for a missing or unopenable file.
  std::string hint = {};
  /// Where to report what was consumed; null for nowhere.
  ReadStats* stats = nullptr;
};

/// Reads an unsigned-byte IDX file with `ndim` dimensions. Throws IOError
/// naming `path` and the problem for a missing or unreadable file, a corrupt
/// or truncated gzip stream, a wrong magic number or element type, extents
/// other than `options.expected_dims`, an announced size whose product
/// overflows or exceeds `options.max_bytes`, or data shorter or longer than
/// the header announces.
UByteArray read_ubyte(const std::string& path, int ndim, const ReadOptions& options = {});

}  // namespace mixgrad::data::idx
