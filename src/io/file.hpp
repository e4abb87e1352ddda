// Files for the io layer: positioned reads of a file whose size is known
// up front, and atomic replacement of a file (write a temporary in the same
// directory, fsync it, rename it over the target, fsync the directory).
// Every failure throws IOError naming the path and the system's reason.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

namespace mixgrad::io::detail {

/// A regular file opened for reading.
class ReadFile {
 public:
  /// Throws IOError if `path` is missing, not a regular file or unreadable.
  static ReadFile open(const std::filesystem::path& path);
  ReadFile(ReadFile&& other) noexcept;
  ReadFile& operator=(ReadFile&&) = delete;
  ~ReadFile();

  /// The size when opened.
  uint64_t size() const { return size_; }
  /// Reads exactly [offset, offset + n), which must lie within size();
  /// throws IOError when the file ends early (it shrank) or a read fails.
  void read_at(uint64_t offset, void* dst, uint64_t n) const;

 private:
  ReadFile(int fd, uint64_t size, std::filesystem::path path) : fd_(fd), size_(size), path_(std::move(path)) {}
  int fd_ = -1;
  uint64_t size_ = 0;
  std::filesystem::path path_;
};

/// Called before every AtomicFile::write with the target and the bytes of it
/// already written. For the tests alone (the kill-and-resume test kills its
/// process half way through a checkpoint); null, the default, calls nothing.
using WriteHook = void (*)(const std::filesystem::path& target, uint64_t written);
void set_write_hook(WriteHook hook);

/// A file written under a temporary name and moved into place by commit().
/// Destroyed without commit(), it removes the temporary: the target is
/// never seen half written.
class AtomicFile {
 public:
  /// Creates the temporary next to `path`; throws IOError if it cannot.
  explicit AtomicFile(std::filesystem::path path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  /// Appends n bytes; throws IOError (disk full, ...).
  void write(const void* data, uint64_t n);
  /// fsync, rename over the target, fsync the directory.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  std::filesystem::path path_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

}  // namespace mixgrad::io::detail
