#include "data/idx_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>

#include "mixgrad/error.hpp"

namespace mixgrad::data::idx {

namespace {

// Trailing bytes are counted up to this many; past it the message says "at
// least", so a file with gigabytes of padding is not inflated to the end.
constexpr uint64_t kTrailingProbe = 64 * 1024;

const char* type_name(unsigned code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return nullptr;
  }
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// A gzip (or, through gzread, plain) file read in pieces, reporting what it
// consumed to ReadStats after every piece.
class GzStream {
 public:
  GzStream(const std::string& path, const std::string& hint, ReadStats* stats) : path_(path), stats_(stats) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw IOError("cannot open " + path + ": no such file" + hint);
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) throw IOError("cannot open " + path + ": " + std::strerror(errno) + hint);
  }
  GzStream(const GzStream&) = delete;
  GzStream& operator=(const GzStream&) = delete;
  ~GzStream() { gzclose(file_); }

  // Reads up to `n` bytes into `dst`; fewer only at the end of the data.
  uint64_t read(uint8_t* dst, uint64_t n) {
    uint64_t got = 0;
    while (got < n) {
      const unsigned want = static_cast<unsigned>(std::min<uint64_t>(n - got, INT_MAX));
      const int r = gzread(file_, dst + got, want);
      if (r < 0) throw_stream_error();
      got += static_cast<uint64_t>(r);
      report();
      if (r == 0) break;
    }
    return got;
  }

  // A gzip stream cut short reads as a clean end of data; zlib reports it
  // only through the error state.
  void check() {
    int err = Z_OK;
    gzerror(file_, &err);
    if (err != Z_OK) throw_stream_error();
  }

 private:
  [[noreturn]] void throw_stream_error() {
    int err = Z_OK;
    const std::string msg = gzerror(file_, &err);
    throw IOError(path_ + ": truncated or corrupt compressed data (" + msg + ")");
  }

  void report() {
    if (!stats_) return;
    stats_->decompressed = static_cast<uint64_t>(std::max<z_off_t>(gztell(file_), 0));
    stats_->compressed = static_cast<uint64_t>(std::max<z_off_t>(gzoffset(file_), 0));
  }

  std::string path_;
  ReadStats* stats_;
  gzFile file_ = nullptr;
};

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

void check_magic(const std::string& path, uint32_t magic, int ndim) {
  const uint32_t want = 0x0800u | static_cast<uint32_t>(ndim);
  if (magic == want) return;
  std::string why;
  const unsigned type = (magic >> 8) & 0xFF, dims = magic & 0xFF;
  if (magic >> 16 != 0) {
    why = "not an IDX file";
  } else if (type != 0x08) {
    const char* name = type_name(type);
    char code[8];
    std::snprintf(code, sizeof code, "0x%02x", type);
    why = name ? std::string("its values are ") + name + ", not unsigned bytes"
               : std::string("unknown element type code ") + code;
  } else {
    why = "it has " + std::to_string(dims) + " dims, not " + std::to_string(ndim);
  }
  throw IOError(path + ": bad magic number " + hex32(magic) + " (expected " + hex32(want) +
                ", an unsigned-byte IDX file of " + std::to_string(ndim) + " dims): " + why);
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? " x " : "") + (dims[i] < 0 ? std::string("any") : std::to_string(dims[i]));
  return s;
}

}  // namespace

UByteArray read_ubyte(const std::string& path, int ndim, const ReadOptions& options) {
  if (ndim < 1 || ndim > 255) throw ValueError("idx::read_ubyte: ndim must be in 1..255, got " + std::to_string(ndim));
  if (!options.expected_dims.empty() && options.expected_dims.size() != static_cast<size_t>(ndim))
    throw ValueError("idx::read_ubyte: expected_dims holds " + std::to_string(options.expected_dims.size()) +
                     " extents for a file of " + std::to_string(ndim) + " dims");
  GzStream in(path, options.hint, options.stats);

  // The header, checked piece by piece before anything is allocated for the data.
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndim);
  std::vector<uint8_t> head(header);
  auto truncated_header = [&](uint64_t got) {
    in.check();
    return IOError(path + ": truncated header (" + std::to_string(got) + " bytes, need " + std::to_string(header) +
                   ")");
  };
  const uint64_t got = in.read(head.data(), 4);
  if (got < 4) throw truncated_header(got);
  check_magic(path, big_endian_u32(head.data()), ndim);
  const uint64_t got_dims = in.read(head.data() + 4, header - 4);
  if (got_dims < header - 4) throw truncated_header(4 + got_dims);

  UByteArray out;
  uint64_t count = 1;
  bool overflow = false;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t extent = big_endian_u32(head.data() + 4 + 4 * d);
    out.dims.push_back(extent);
    overflow = overflow || __builtin_mul_overflow(count, uint64_t{extent}, &count);
  }
  if (!options.expected_dims.empty()) {
    for (int d = 0; d < ndim; ++d) {
      const int64_t want = options.expected_dims[d];
      if (want >= 0 && out.dims[d] != want)
        throw IOError(path + ": the header announces extents " + dims_text(out.dims) + ", expected " +
                      dims_text(options.expected_dims));
    }
  }
  if (overflow)
    throw IOError(path + ": the header announces extents " + dims_text(out.dims) + " whose product overflows 64 bits");
  if (count > options.max_bytes)
    throw IOError(path + ": the header announces extents " + dims_text(out.dims) + ", " + std::to_string(count) +
                  " bytes, more than the limit of " + std::to_string(options.max_bytes));

  // Exactly the announced data, then a bounded look past it. The buffer is
  // reserved once but filled piece by piece, so a header that lies about a
  // short file costs address space, not zeroed memory.
  try {
    out.values.reserve(count);
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(path + ": cannot allocate the " + std::to_string(count) + " bytes the header announces");
  }
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  uint64_t have = 0;
  while (have < count) {
    const uint64_t want = std::min(count - have, kPiece);
    out.values.resize(have + want);
    const uint64_t r = in.read(out.values.data() + have, want);
    have += r;
    if (r < want) break;
  }
  if (have < count) {
    in.check();
    throw IOError(path + ": truncated: the header announces " + std::to_string(count) + " values, the file holds " +
                  std::to_string(have));
  }
  uint8_t probe[4096];
  uint64_t extra = 0;
  while (extra < kTrailingProbe) {
    const uint64_t r = in.read(probe, sizeof probe);
    extra += r;
    if (r < sizeof probe) break;
  }
  in.check();
  if (extra > 0)
    throw IOError(path + ": malformed: " + (extra >= kTrailingProbe ? "at least " : "") + std::to_string(extra) +
                  " bytes after the " + std::to_string(count) + " values the header announces");
  return out;
}

}  // namespace mixgrad::data::idx
