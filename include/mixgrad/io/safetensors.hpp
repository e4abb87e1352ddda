// mixgrad/io/safetensors.hpp — named tensors in the safetensors format, the
// file format of Hugging Face's `safetensors` package: files written here
// open in Python (safetensors.numpy / .torch), and theirs open here.
//
//   mg::io::save_file(net.state_dict(), "net.safetensors", {{"epoch", "3"}});
//   mg::io::Metadata meta;
//   mg::StateDict sd = mg::io::load_file("net.safetensors", &meta);
//   net.load_state_dict(sd);
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON mapping
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} plus
// an optional "__metadata__" object of strings, then the raw little-endian
// data of all tensors, back to back in insertion order.
//
// Writes are atomic: the bytes go to a temporary file in the target's
// directory, which is flushed to disk (fsync) and renamed over the target;
// a crash leaves either the old file or the new one. A CRC-32 of the data
// is stored in the metadata ("mixgrad.crc32") and verified on load when
// present (files from other tools have none).
//
// Loading never trusts the file: the header length is capped
// (kMaxHeaderBytes), every offset, shape and size is checked with
// overflow-safe arithmetic against the bytes the file really holds before
// any tensor is allocated, and every problem — a truncated or corrupt file,
// an unknown dtype, overlapping or out-of-range offsets, a checksum
// mismatch — throws IOError naming the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixgrad/state_dict.hpp"

namespace mixgrad::io {

/// The "__metadata__" map of a safetensors file: free-form strings.
using Metadata = std::map<std::string, std::string>;

/// The largest JSON header accepted on load (100 MiB), checked before the
/// header is read.
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
/// The metadata key of the data checksum (CRC-32 as 8 lowercase hex digits).
inline constexpr std::string_view kChecksumKey = "mixgrad.crc32";

/// The file as bytes: what save_file writes. Tensors on other devices are
/// copied to the host; views are written contiguously. Throws ValueError for
/// an empty key or a metadata key equal to kChecksumKey (it is computed).
std::vector<std::byte> save_bytes(const StateDict& tensors, const Metadata& metadata = {});

/// Writes `tensors` (and `metadata`) to `path` atomically. Throws IOError
/// naming the path when the file cannot be written; the old file, if any,
/// is then left as it was.
void save_file(const StateDict& tensors, const std::filesystem::path& path, const Metadata& metadata = {});

/// Parses a safetensors image held in memory. `source` names it in error
/// messages. Host tensors are returned in the order of their data offsets
/// (the insertion order for files written by mixgrad); the metadata goes to
/// `*metadata` when given. Throws IOError for anything malformed.
StateDict load_bytes(std::span<const std::byte> bytes, Metadata* metadata = nullptr,
                     std::string_view source = "<memory>");

/// Reads a safetensors file. Only the header and the tensors' bytes are
/// read (each straight into its tensor); throws IOError naming `path` when
/// the file is missing, unreadable or malformed.
StateDict load_file(const std::filesystem::path& path, Metadata* metadata = nullptr);

/// The metadata of a safetensors file alone (header only; no checksum check).
Metadata load_metadata(const std::filesystem::path& path);

}  // namespace mixgrad::io
