// text.hpp — the character-level corpus: every plain-text fortune file of
// Debian's `fortunes` package joined into one string (about 2.5 MB of
// English), a byte vocabulary, and random training windows.
//
//   auto corpus = gpt::load_corpus("/usr/share/games/fortunes");   // nullopt + a message when missing
//   auto [x, y] = corpus->batch(corpus->train, 32, 64, seed);       // int64 [32, 64]: y is x shifted by one
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mixgrad/mixgrad.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

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
  /// drawn from `seed` alone (a resumed run draws the same): inputs and
  /// targets, int64 [batch, block], on `device`.
  std::pair<mixgrad::Tensor, mixgrad::Tensor> batch(const std::vector<int64_t>& split, int64_t batch, int64_t block,
                                                     uint64_t seed, mixgrad::Device device = mixgrad::Device::cpu()) const {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(split.size()) - block - 1);
    std::vector<int64_t> x, y;
    x.reserve(batch * block);
    y.reserve(batch * block);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t s = start(rng);
      x.insert(x.end(), split.begin() + s, split.begin() + s + block);
      y.insert(y.end(), split.begin() + s + 1, split.begin() + s + block + 1);
    }
    return {mixgrad::tensor<int64_t>(x, {batch, block}).to(device), mixgrad::tensor<int64_t>(y, {batch, block}).to(device)};
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
