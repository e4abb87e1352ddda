#include "train/run_state.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "mixgrad/error.hpp"

namespace mixgrad::train::detail {

namespace {

const std::string kHistory = "runner.history";
const std::string kPartial = "runner.partial";
const std::string kBest = "runner.best";
const std::string kBadEpochs = "runner.bad_epochs";

std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

// "name=value;name=value"
std::string encode(const Metrics& m) {
  std::string s;
  for (const auto& [name, v] : m) {
    if (!s.empty()) s += ';';
    s += name + '=' + exact(v);
  }
  return s;
}

struct Parser {
  const std::filesystem::path& file;
  [[noreturn]] void fail(const std::string& what) const {
    throw IOError("Runner::load_checkpoint: '" + file.string() + "': " + what + "; nothing was loaded");
  }
  double number(const std::string& key, const std::string& s) const {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) fail("'" + key + "' holds '" + s + "', not a number");
    return v;
  }
  Metrics metrics(const std::string& key, std::string_view s) const {
    Metrics m;
    while (!s.empty()) {
      const size_t end = std::min(s.find(';'), s.size());
      const std::string_view item = s.substr(0, end);
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0) fail("'" + key + "' holds a malformed entry '" + std::string(item) + "'");
      m[std::string(item.substr(0, eq))] = number(key, std::string(item.substr(eq + 1)));
      s.remove_prefix(std::min(end + 1, s.size()));
    }
    return m;
  }
  const std::string& get(const io::Metadata& meta, const std::string& key) const {
    auto it = meta.find(key);
    if (it == meta.end()) fail("metadata 'user." + key + "' is missing: not a checkpoint of a Runner");
    return it->second;
  }
};

}  // namespace

void write_run_state(const RunState& s, io::Metadata& meta) {
  std::string history;
  for (const Metrics& m : s.history) history += encode(m) + '\n';
  meta[kHistory] = history;
  meta[kPartial] = encode(s.partial);
  meta[kBest] = exact(s.best);
  meta[kBadEpochs] = std::to_string(s.bad_epochs);
}

RunState read_run_state(const io::Metadata& meta, const std::filesystem::path& file) {
  const Parser p{file};
  RunState s;
  std::string_view history = p.get(meta, kHistory);
  while (!history.empty()) {
    const size_t end = std::min(history.find('\n'), history.size());
    s.history.push_back(p.metrics(kHistory, history.substr(0, end)));
    history.remove_prefix(std::min(end + 1, history.size()));
  }
  s.partial = p.metrics(kPartial, p.get(meta, kPartial));
  s.best = p.number(kBest, p.get(meta, kBest));
  const std::string& bad = p.get(meta, kBadEpochs);
  const auto [ptr, ec] = std::from_chars(bad.data(), bad.data() + bad.size(), s.bad_epochs);
  if (ec != std::errc() || ptr != bad.data() + bad.size() || s.bad_epochs < 0)
    p.fail("'" + kBadEpochs + "' holds '" + bad + "', not a count");
  return s;
}

}  // namespace mixgrad::train::detail
