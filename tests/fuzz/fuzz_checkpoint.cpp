// libFuzzer target: the safetensors / checkpoint reader on arbitrary bytes.
// Whatever the input, loading either succeeds or throws a mixgrad::Error
// (IOError for malformed files); anything else — another exception, a
// crash, a sanitizer report, an allocation the file does not back — is a bug.
//
//   clang++ -g -O1 -fsanitize=fuzzer,address,undefined ... fuzz_checkpoint.cpp -lmixgrad
//   ./fuzz_checkpoint tests/fuzz/corpus/checkpoint
//
// The input goes through both entry points: load_bytes (memory) and, for
// the file path with its positioned reads, load_file on a temporary copy.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mixgrad/mixgrad.hpp>
#include <span>
#include <string>

namespace mg = mixgrad;

namespace {

// Loaded tensors are read back (sums of their bytes) so that a tensor the
// header claims but the data does not back shows up under the sanitizers.
void touch(const mg::StateDict& sd) {
  unsigned sum = 0;
  for (const auto& [name, t] : sd) {
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    const int64_t n = t.numel() * mg::element_size(t.dtype());
    for (int64_t i = 0; i < n; ++i) sum += p[i];
  }
  volatile unsigned sink = sum;
  (void)sink;
}

const std::filesystem::path& temp_file() {
  static const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("fuzz_checkpoint_" + std::to_string(::getpid()) + ".safetensors");
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    mg::io::Metadata meta;
    touch(mg::io::load_bytes(bytes, &meta, "fuzz"));
  } catch (const mg::Error&) {
  }
  // Every few inputs, the file path too (it reads with pread, not memcpy).
  if (size % 4 == 0) {
    if (std::FILE* f = std::fopen(temp_file().c_str(), "wb")) {
      const bool ok = std::fwrite(data, 1, size, f) == size;
      std::fclose(f);
      if (ok) {
        try {
          touch(mg::io::load_file(temp_file()));
        } catch (const mg::Error&) {
        }
      }
    }
  }
  return 0;
}
