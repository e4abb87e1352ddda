#include "io/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "mixgrad/error.hpp"

namespace mixgrad::io::detail {

namespace {

std::string reason(int err) { return std::strerror(err); }

// Temporary names unique within the process (and, through the pid, across
// processes writing the same directory).
std::atomic<uint64_t> g_tmp_counter{0};
std::atomic<WriteHook> g_write_hook{nullptr};

}  // namespace

ReadFile ReadFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IOError("cannot open '" + path.string() + "' for reading: " + reason(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IOError("cannot stat '" + path.string() + "': " + reason(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IOError("'" + path.string() + "' is not a regular file");
  }
  return ReadFile(fd, static_cast<uint64_t>(st.st_size), path);
}

ReadFile::ReadFile(ReadFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd_, out, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IOError("cannot read '" + path_.string() + "': " + reason(errno));
    }
    if (got == 0) throw IOError("'" + path_.string() + "' ended early at byte " + std::to_string(offset) + " (truncated while reading?)");
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  if (path_.filename().empty()) throw IOError("cannot write '" + path_.string() + "': not a file name");
  tmp_ = path_;
  // Appended piece by piece: GCC 12 warns (falsely, -Wrestrict) on "." + string.
  std::string name(1, '.');
  name += path_.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  name += '-';
  name += std::to_string(g_tmp_counter.fetch_add(1));
  tmp_.replace_filename(name);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) throw IOError("cannot create '" + tmp_.string() + "' to write '" + path_.string() + "': " + reason(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  throw IOError("cannot write '" + path_.string() + "': " + what + ": " + reason(err) + "; the file was left as it was");
}

void set_write_hook(WriteHook hook) { g_write_hook = hook; }

void AtomicFile::write(const void* data, uint64_t n) {
  if (const WriteHook hook = g_write_hook.load()) hook(path_, written_);
  written_ += n;
  const auto* in = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t put = ::write(fd_, in, chunk);
    if (put < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    in += put;
    n -= static_cast<uint64_t>(put);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("fsync", errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail("close", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename", errno);
  tmp_.clear();  // now the target: nothing to remove
  // The rename is durable once the directory is flushed too.
  std::filesystem::path dir = path_.parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;  // written and renamed; only the durability of the rename is unknown
  ::fsync(dfd);
  ::close(dfd);
}

}  // namespace mixgrad::io::detail
