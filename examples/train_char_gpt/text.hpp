// text.hpp — the character-level corpus: every plain-text fortune file of
// Debian's `fortunes` package joined into one string (about 2.5 MB of
// English), a byte vocabulary, and random training windows.
//
//   auto corpus = gpt::load_corpus("/usr/share/games/fortunes");   // nullopt + a message when missing
//   auto w = corpus->windows(corpus->train, 32, 64, gpt::train_batch_seed(seed, step));
//   // w.x, w.y: 32 * 64 tokens each, row-major [32, 64]; y is x shifted by one
//
// Plain C++ only, no mixgrad: the LibTorch twin of the example
// (tests/perf/gpt_twin_libtorch.cpp) reads the same text, vocabulary, split
// and batches through this header.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

/// The seed of training step `step`'s batch, and of the `b`-th of the fixed
/// validation batches: a batch depends on its seed alone, so a resumed run
/// and the LibTorch twin draw the same ones.
inline uint64_t train_batch_seed(uint64_t seed, int64_t step) { return seed * 1'000'003 + static_cast<uint64_t>(step); }
inline uint64_t val_batch_seed(int64_t b) { return 1'000'000 + static_cast<uint64_t>(b); }

/// A batch of windows: inputs and targets, `batch` rows of `block` tokens each.
struct Windows {
  std::vector<int64_t> x, y;
};

struct Corpus {
  std::string alphabet;                 // the bytes that occur, sorted: token i is alphabet[i]
  std::array<int64_t, 256> token_of{};  // byte -> token
  std::vector<int64_t> train, val;      // the first 90% of the text and the rest, as tokens
  int64_t files = 0, bytes = 0;

  int64_t vocab_size() const { return static_cast<int64_t>(alphabet.size()); }

  std::vector<int64_t> encode(const std::string& s) const {
    std::vector<int64_t> out;
    for (unsigned char c : s) out.push_back(token_of[c]);
    return out;
  }
  std::string decode(const std::vector<int64_t>& tokens) const {
    std::string s;
    for (int64_t t : tokens) s += alphabet[static_cast<size_t>(t)];
    return s;
  }

  /// `batch` windows of `block` + 1 tokens at random places of `split`,
  /// drawn from `seed` alone: inputs and targets, row-major [batch, block].
  Windows windows(const std::vector<int64_t>& split, int64_t batch, int64_t block, uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(split.size()) - block - 1);
    Windows w;
    w.x.reserve(batch * block);
    w.y.reserve(batch * block);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t s = start(rng);
      w.x.insert(w.x.end(), split.begin() + s, split.begin() + s + block);
      w.y.insert(w.y.end(), split.begin() + s + 1, split.begin() + s + block + 1);
    }
    return w;
  }
};

/// The plain-text files of `dir` (not the .dat indexes, not the .u8 links)
/// in name order, fortunes separated by "%" lines turned into blank lines.
/// Prints why and returns nullopt when there is nothing to read.
inline std::optional<Corpus> load_corpus(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  Corpus c;
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string line;
    while (std::getline(in, line)) text += line == "%" ? "\n" : line + "\n";
    ++c.files;
  }
  if (text.size() < 10000) {
    std::fprintf(stderr,
                 "train_char_gpt: no text in %s (found %lld files). Install it with: apt-get install fortunes\n"
                 "(or pass --data-dir with a folder of plain-text files)\n",
                 dir.c_str(), static_cast<long long>(files.size()));
    return std::nullopt;
  }
  std::array<bool, 256> seen{};
  for (unsigned char ch : text) seen[ch] = true;
  for (int b = 0; b < 256; ++b)
    if (seen[b]) {
      c.token_of[b] = static_cast<int64_t>(c.alphabet.size());
      c.alphabet += static_cast<char>(b);
    }
  const auto tokens = c.encode(text);
  const auto cut = tokens.begin() + static_cast<std::ptrdiff_t>(tokens.size() * 9 / 10);
  c.train.assign(tokens.begin(), cut);
  c.val.assign(cut, tokens.end());
  c.bytes = static_cast<int64_t>(text.size());
  return c;
}

}  // namespace gpt
