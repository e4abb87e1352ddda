// libFuzzer target for the IDX reader (data/idx_file.hpp), the parser behind
// data::FashionMNIST. Each input is written to a file and read as an IDX file
// of 1 and of 3 dims; gzread takes plain files as they are, so the fuzzer
// reaches the header checks directly as well as through gzip streams.
// Any exception other than mixgrad::Error, any sanitizer report, a leak or
// a run past -rss_limit_mb / -timeout is a finding.
//
//   build-asan/tests/fuzz/fuzz_idx -max_total_time=60 corpus-dir tests/fuzz/corpus/idx
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "data/idx_file.hpp"
#include "mixgrad/error.hpp"

namespace {

// One file per process: libFuzzer's -jobs/-workers run several at once.
const std::string& input_path() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("mixgrad_fuzz_idx_" + std::to_string(::getpid()) + ".gz")).string();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = input_path();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  const bool written = std::fwrite(data, 1, size, f) == size;
  if (std::fclose(f) != 0 || !written) return 0;

  namespace idx = mixgrad::data::idx;
  // A small cap keeps every run fast; the cap itself is what is under test
  // for larger announcements.
  constexpr uint64_t kMaxBytes = uint64_t{1} << 20;
  try {
    const auto a = idx::read_ubyte(path, 1, {.max_bytes = kMaxBytes});
    if (a.dims.size() != 1 || static_cast<uint64_t>(a.dims[0]) != a.values.size()) __builtin_trap();
  } catch (const mixgrad::Error&) {
  }
  try {
    const auto a = idx::read_ubyte(path, 3, {.expected_dims = {-1, 28, 28}, .max_bytes = kMaxBytes});
    if (a.dims.size() != 3 || static_cast<uint64_t>(a.dims[0]) * 28 * 28 != a.values.size()) __builtin_trap();
  } catch (const mixgrad::Error&) {
  }
  return 0;
}
