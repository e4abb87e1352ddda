#include "mixgrad/io/safetensors.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hooks/op_hooks.hpp"
#include "io/file.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mixgrad::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

// The safetensors dtype names mixgrad has a dtype for.
constexpr std::pair<DType, std::string_view> kDTypeNames[] = {
    {DType::float32, "F32"}, {DType::float16, "F16"}, {DType::bfloat16, "BF16"}, {DType::float64, "F64"},
    {DType::int32, "I32"},   {DType::int64, "I64"},   {DType::bool_, "BOOL"},    {DType::int8, "I8"},
    {DType::uint8, "U8"},
};

std::string_view dtype_name(DType t) {
  for (const auto& [d, name] : kDTypeNames)
    if (d == t) return name;
  throw DTypeError("safetensors: no name for dtype " + std::string(to_string(t)));
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& [d, n] : kDTypeNames)
    if (n == name) return d;
  return std::nullopt;
}

std::string hex32(uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return s;
}

uint32_t crc_update(uint32_t crc, const void* data, uint64_t n) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(n)));
}

// ---------------------------------------------------------------- writing

// The tensors as contiguous host tensors plus the header, ready to write.
struct Prepared {
  std::vector<Tensor> host;
  std::string header;  // padded with spaces to a multiple of 8 bytes
};

Prepared prepare(const StateDict& tensors, const Metadata& metadata) {
  autodiff::NoRecordScope no_record;
  Prepared out;
  out.host.reserve(tensors.size());
  uint32_t crc = crc_update(0, nullptr, 0);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  // Tensor entries first (a JSON object's order does not matter to readers;
  // this one follows the data).
  nlohmann::ordered_json entries = nlohmann::ordered_json::object();
  for (const auto& [key, value] : tensors) {
    if (key.empty()) throw ValueError("safetensors: a tensor name must not be empty");
    if (key == kMetadataKey) throw ValueError("safetensors: '__metadata__' cannot name a tensor");
    Tensor t = value.detach();
    if (t.device() != Device::cpu()) t = t.to(Device::cpu());
    t = t.contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(element_size(t.dtype()));
    crc = crc_update(crc, t.raw_data(), nbytes);
    entries[key] = {{"dtype", dtype_name(t.dtype())}, {"shape", t.shape().vec()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    out.host.push_back(std::move(t));
  }
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) {
    if (k == kChecksumKey)
      throw ValueError("safetensors: metadata key '" + std::string(kChecksumKey) + "' is reserved (computed on save)");
    meta[k] = v;
  }
  meta[std::string(kChecksumKey)] = hex32(crc);
  header[std::string(kMetadataKey)] = std::move(meta);
  for (auto& [k, v] : entries.items()) header[k] = std::move(v);
  try {
    out.header = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or value that is not UTF-8
    throw ValueError(std::string("safetensors: tensor names and metadata must be UTF-8: ") + e.what());
  }
  out.header.append((8 - out.header.size() % 8) % 8, ' ');
  return out;
}

std::array<std::byte, 8> length_prefix(uint64_t n) {
  std::array<std::byte, 8> b;
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  return b;
}

uint64_t nbytes_of(const Tensor& t) {
  return static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(element_size(t.dtype()));
}

// ---------------------------------------------------------------- reading

// Where the bytes come from: memory or a file.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  /// Copies [offset, offset + n) to dst; the range is within size().
  virtual void read(uint64_t offset, void* dst, uint64_t n) = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(std::span<const std::byte> bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(uint64_t offset, void* dst, uint64_t n) override {
    if (n) std::memcpy(dst, bytes_.data() + offset, n);
  }

 private:
  std::span<const std::byte> bytes_;
};

class FileSource final : public Source {
 public:
  explicit FileSource(const std::filesystem::path& path) : file_(detail::ReadFile::open(path)) {}
  uint64_t size() const override { return file_.size(); }
  void read(uint64_t offset, void* dst, uint64_t n) override { file_.read_at(offset, dst, n); }

 private:
  detail::ReadFile file_;
};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

struct Header {
  uint64_t data_start = 0;  // file offset of the data
  std::vector<Entry> entries;  // sorted by begin
  Metadata metadata;
};

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& what) const { throw IOError("safetensors: " + source_ + ": " + what); }

  Header parse_header(Source& src) {
    const uint64_t size = src.size();
    if (size < 8) fail("file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
    std::array<unsigned char, 8> prefix;
    src.read(0, prefix.data(), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[static_cast<size_t>(i)];
    if (n > kMaxHeaderBytes)
      fail("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
           " bytes (not a safetensors file, or corrupt)");
    if (n > size - 8)
      fail("header length " + std::to_string(n) + " but only " + std::to_string(size - 8) +
           " bytes follow (truncated file?)");
    if (n < 2) fail("header of " + std::to_string(n) + " bytes cannot hold a JSON object");
    std::string text(n, '\0');
    src.read(8, text.data(), n);
    check_nesting(text);
    Json root;
    try {
      root = parse_json_unique_keys(text);
    } catch (const Json::exception& e) {
      fail(std::string("header is not valid JSON: ") + e.what());
    }
    if (!root.is_object()) fail("header must be a JSON object, got " + std::string(root.type_name()));

    Header h;
    h.data_start = 8 + n;
    const uint64_t data_size = size - h.data_start;
    for (const auto& [key, value] : root.items()) {
      if (key == kMetadataKey) {
        if (!value.is_object()) fail("'__metadata__' must be an object of strings");
        for (const auto& [k, v] : value.items()) {
          if (!v.is_string()) fail("'__metadata__' entry '" + k + "' is not a string");
          h.metadata.emplace(k, v.get<std::string>());
        }
        continue;
      }
      h.entries.push_back(parse_entry(key, value));
    }

    // The tensors must tile the data exactly: no overlap, no gap, nothing
    // past the end (a truncated file) and nothing after the last tensor.
    std::sort(h.entries.begin(), h.entries.end(),
              [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    uint64_t expected = 0;
    for (const Entry& e : h.entries) {
      if (e.end > data_size)
        fail("tensor '" + e.name + "' ends at data byte " + std::to_string(e.end) + " but the file holds only " +
             std::to_string(data_size) + " data bytes (truncated file?)");
      if (e.begin < expected)
        fail("tensor '" + e.name + "' at data bytes [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
             ") overlaps the tensor before it, which ends at " + std::to_string(expected));
      if (e.begin > expected)
        fail("gap in the data: tensor '" + e.name + "' starts at byte " + std::to_string(e.begin) +
             " but the tensor before it ends at " + std::to_string(expected));
      expected = e.end;
    }
    if (expected != data_size)
      fail("the tensors cover " + std::to_string(expected) + " data bytes but the file holds " +
           std::to_string(data_size) + " (trailing bytes)");
    return h;
  }

  // Reads every tensor (allocating only now that the header is checked),
  // then verifies the checksum when the metadata has one.
  StateDict read_tensors(Source& src, const Header& h) {
    StateDict out;
    uint32_t crc = crc_update(0, nullptr, 0);
    for (const Entry& e : h.entries) {
      Tensor t = empty(e.shape, e.dtype);
      const uint64_t n = e.end - e.begin;
      src.read(h.data_start + e.begin, t.raw_data(), n);
      crc = crc_update(crc, t.raw_data(), n);
      if (e.dtype == DType::bool_) {
        // A bool other than 0 / 1 is undefined behaviour in C++: refuse it.
        const auto* b = static_cast<const unsigned char*>(t.raw_data());
        for (uint64_t i = 0; i < n; ++i)
          if (b[i] > 1) fail("tensor '" + e.name + "' (BOOL) holds the byte " + std::to_string(b[i]) + " at element " +
                             std::to_string(i) + "; booleans must be 0 or 1");
      }
      try {
        out.insert(e.name, std::move(t));
      } catch (const ValueError&) {
        fail("tensor name '" + e.name + "' appears twice");
      }
    }
    if (auto it = h.metadata.find(std::string(kChecksumKey)); it != h.metadata.end() && it->second != hex32(crc))
      fail("checksum mismatch: the header records CRC-32 " + it->second + " but the data has " + hex32(crc) +
           " (corrupt file)");
    return out;
  }

 private:
  // The header is at most 3 levels deep (root, entry, shape); refusing
  // deeper nesting before parsing bounds the parser's work and recursion.
  void check_nesting(const std::string& text) const {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
      if (in_string) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        if (++depth > 3) fail("header nests JSON deeper than a safetensors header can");
      } else if (c == '}' || c == ']') {
        --depth;
      }
    }
  }

  uint64_t unsigned_value(const std::string& name, const char* field, const Json& v) const {
    if (!v.is_number_unsigned()) fail("tensor '" + name + "': " + field + " must hold non-negative integers");
    return v.get<uint64_t>();
  }

  // nlohmann keeps the last of two equal keys; a header naming a tensor
  // twice is ambiguous (other readers may take the first), so it is refused.
  Json parse_json_unique_keys(const std::string& text) const {
    std::vector<std::set<std::string>> open_objects;
    std::string duplicate;
    auto on_event = [&](int, Json::parse_event_t event, Json& parsed) {
      if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
      if (event == Json::parse_event_t::object_end) open_objects.pop_back();
      if (event == Json::parse_event_t::key && !open_objects.empty() &&
          !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
      return true;
    };
    Json root = Json::parse(text, on_event);
    if (!duplicate.empty()) fail("header names '" + duplicate + "' twice");
    return root;
  }

  Entry parse_entry(const std::string& name, const Json& v) const {
    if (name.empty()) fail("a tensor has an empty name");
    if (!v.is_object()) fail("tensor '" + name + "': entry must be an object");
    for (const auto& [k, unused] : v.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets") fail("tensor '" + name + "': unknown field '" + k + "'");
    const auto dtype_it = v.find("dtype");
    const auto shape_it = v.find("shape");
    const auto offsets_it = v.find("data_offsets");
    if (dtype_it == v.end() || shape_it == v.end() || offsets_it == v.end())
      fail("tensor '" + name + "': entry needs \"dtype\", \"shape\" and \"data_offsets\"");
    if (!dtype_it->is_string()) fail("tensor '" + name + "': dtype must be a string");
    const std::string dtype_str = dtype_it->get<std::string>();
    const std::optional<DType> dtype = dtype_from_name(dtype_str);
    if (!dtype)
      fail("tensor '" + name + "': dtype '" + dtype_str + "' is not supported (F32, F16, BF16, F64, I32, I64, BOOL)");

    if (!shape_it->is_array()) fail("tensor '" + name + "': shape must be an array");
    if (shape_it->size() > static_cast<size_t>(Shape::kMaxDims))
      fail("tensor '" + name + "': " + std::to_string(shape_it->size()) + " dimensions, at most " +
           std::to_string(Shape::kMaxDims) + " are supported");
    std::vector<int64_t> dims;
    uint64_t nbytes = static_cast<uint64_t>(element_size(*dtype));
    for (const Json& d : *shape_it) {
      const uint64_t dim = unsigned_value(name, "shape", d);
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(nbytes, dim, &nbytes))
        fail("tensor '" + name + "': shape " + shape_it->dump() + " is too large");
      dims.push_back(static_cast<int64_t>(dim));
    }
    if (nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("tensor '" + name + "': shape " + shape_it->dump() + " is too large");

    if (!offsets_it->is_array() || offsets_it->size() != 2)
      fail("tensor '" + name + "': data_offsets must be [begin, end]");
    const uint64_t begin = unsigned_value(name, "data_offsets", (*offsets_it)[0]);
    const uint64_t end = unsigned_value(name, "data_offsets", (*offsets_it)[1]);
    if (end < begin)
      fail("tensor '" + name + "': data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
           "] end before they begin");
    if (end - begin != nbytes)
      fail("tensor '" + name + "': " + dtype_str + " " + shape_it->dump() + " needs " + std::to_string(nbytes) +
           " bytes but data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] span " +
           std::to_string(end - begin));
    return {name, *dtype, Shape(dims), begin, end};
  }

  std::string source_;
};

}  // namespace

std::vector<std::byte> save_bytes(const StateDict& tensors, const Metadata& metadata) {
  const Prepared p = prepare(tensors, metadata);
  uint64_t total = 8 + p.header.size();
  for (const Tensor& t : p.host) total += nbytes_of(t);
  std::vector<std::byte> out;
  out.reserve(total);
  const auto prefix = length_prefix(p.header.size());
  out.insert(out.end(), prefix.begin(), prefix.end());
  const auto* h = reinterpret_cast<const std::byte*>(p.header.data());
  out.insert(out.end(), h, h + p.header.size());
  for (const Tensor& t : p.host) {
    const auto* d = static_cast<const std::byte*>(t.raw_data());
    out.insert(out.end(), d, d + nbytes_of(t));
  }
  return out;
}

void save_file(const StateDict& tensors, const std::filesystem::path& path, const Metadata& metadata) {
  const Prepared p = prepare(tensors, metadata);
  detail::AtomicFile file(path);
  const auto prefix = length_prefix(p.header.size());
  file.write(prefix.data(), prefix.size());
  file.write(p.header.data(), p.header.size());
  for (const Tensor& t : p.host) file.write(t.raw_data(), nbytes_of(t));
  file.commit();
}

StateDict load_bytes(std::span<const std::byte> bytes, Metadata* metadata, std::string_view source) {
  MemorySource src(bytes);
  Parser parser{std::string(source)};
  Header h = parser.parse_header(src);
  StateDict out = parser.read_tensors(src, h);
  if (metadata) *metadata = std::move(h.metadata);
  return out;
}

StateDict load_file(const std::filesystem::path& path, Metadata* metadata) {
  FileSource src(path);
  Parser parser{path.string()};
  Header h = parser.parse_header(src);
  StateDict out = parser.read_tensors(src, h);
  if (metadata) *metadata = std::move(h.metadata);
  return out;
}

Metadata load_metadata(const std::filesystem::path& path) {
  FileSource src(path);
  return Parser{path.string()}.parse_header(src).metadata;
}

}  // namespace mixgrad::io
