// Exact resume from any step: runs of tests/train/resume_worker are killed
// with SIGKILL at random steps (and once half way through writing a
// checkpoint), resumed each time, and the final parameters, optimizer and
// scaler state and metrics are compared bit for bit with a run never
// stopped: for the CNN and the GPT, in float32 and with AMP. Then each piece
// of state, left out on resuming, must make the comparison fail: the test
// can fail, and it does when a checkpoint misses any one of them.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mixgrad/mixgrad.hpp>
#include <random>
#include <string>
#include <vector>

extern char** environ;

namespace mg = mixgrad;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  bool killed = false;  // by SIGKILL
  int exit_code = -1;
};

Outcome run_worker(std::vector<std::string> args) {
  const char* worker = std::getenv("MIXGRAD_RESUME_WORKER");
  BOOST_REQUIRE_MESSAGE(worker, "MIXGRAD_RESUME_WORKER (the resume_worker program) is not set");
  args.insert(args.begin(), worker);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  BOOST_REQUIRE_EQUAL(posix_spawn(&pid, worker, nullptr, nullptr, argv.data(), environ), 0);
  int status = 0;
  BOOST_REQUIRE_EQUAL(waitpid(pid, &status, 0), pid);
  Outcome o;
  o.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
  return o;
}

struct Config {
  std::string model;
  bool amp;
  std::string name() const { return model + (amp ? "-amp" : "-fp32"); }
  std::vector<std::string> args(const fs::path& dir, const fs::path& out) const {
    return {"--model", model, "--amp", amp ? "1" : "0", "--dir", dir.string(), "--out", out.string()};
  }
};

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("mixgrad_kill_resume_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The names of the entries that differ (or exist in one file only); empty when bit-identical.
std::vector<std::string> differences(const fs::path& a, const fs::path& b) {
  const mg::StateDict x = mg::io::load_file(a), y = mg::io::load_file(b);
  std::vector<std::string> out;
  for (const auto& [k, t] : x) {
    const auto u = y.find(k);
    if (!u || u->dtype() != t.dtype() || u->shape() != t.shape() ||
        std::memcmp(u->raw_data(), t.raw_data(), static_cast<size_t>(t.numel()) * mg::element_size(t.dtype())) != 0)
      out.push_back(k);
  }
  for (const auto& [k, t] : y)
    if (!x.find(k)) out.push_back(k);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

bool has_orphan_temp(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) return true;
  return false;
}

fs::path reference(const Config& c) {
  const fs::path dir = fresh_dir(c.name() + "-ref");
  const fs::path out = dir.parent_path() / (c.name() + "-ref.safetensors");
  const Outcome o = run_worker(c.args(dir, out));
  BOOST_REQUIRE_MESSAGE(o.exit_code == 0, c.name() + ": the uninterrupted run failed");
  return out;
}

// Two epochs of 8 steps: kill after a step of epoch 1, after a step of
// epoch 2, half way through the first or second checkpoint the next run
// writes, then run to the end.
void kill_and_resume(const Config& c, uint32_t seed) {
  const fs::path ref = reference(c);
  std::mt19937 gen(seed);
  const int k1 = 1 + static_cast<int>(gen() % 7);  // epoch 1 (steps 1-8)
  const int k2 = 9 + static_cast<int>(gen() % 6);  // epoch 2 (steps 9-16)
  const int w3 = 1 + static_cast<int>(gen() % 2);  // resumed after step k2 - 1: step k2's or k2 + 1's checkpoint
  BOOST_TEST_MESSAGE(c.name() << ": kill after step " << k1 << ", after step " << k2 << ", in checkpoint write "
                              << w3 << " of the next run");
  const fs::path dir = fresh_dir(c.name());
  const fs::path out = dir.parent_path() / (c.name() + ".safetensors");
  auto args = [&](const std::string& opt, int v) {
    auto a = c.args(dir, out);
    a.insert(a.end(), {opt, std::to_string(v)});
    return a;
  };
  BOOST_TEST(run_worker(args("--kill-after-step", k1)).killed);
  BOOST_TEST(!fs::exists(out));
  BOOST_TEST(run_worker(args("--kill-after-step", k2)).killed);
  const auto before_write = mg::io::latest_checkpoint(dir);
  BOOST_TEST(run_worker(args("--kill-in-write", w3)).killed);
  BOOST_TEST(has_orphan_temp(dir));  // the write was cut short; the previous checkpoint stays the latest
  if (w3 == 1) BOOST_TEST((mg::io::latest_checkpoint(dir) == before_write));
  BOOST_REQUIRE_EQUAL(run_worker(c.args(dir, out)).exit_code, 0);
  const auto diff = differences(ref, out);
  BOOST_TEST(diff.empty(), c.name() << ": the resumed run differs from the uninterrupted one in: " << join(diff));
}

// Killed mid-epoch 2, resumed with `part` left out: the result must differ.
void omission_is_caught(const Config& c, const std::string& part) {
  const fs::path ref = reference(c);
  const fs::path dir = fresh_dir(c.name() + "-omit-" + part);
  const fs::path out = dir.parent_path() / (c.name() + "-omit-" + part + ".safetensors");
  auto a = c.args(dir, out);
  a.insert(a.end(), {"--kill-after-step", "11"});
  BOOST_TEST(run_worker(a).killed);
  a = c.args(dir, out);
  a.insert(a.end(), {"--omit", part});
  BOOST_REQUIRE_EQUAL(run_worker(a).exit_code, 0);
  BOOST_TEST(!differences(ref, out).empty(),
             c.name() << ": resuming without the " << part << " state still matched: the test could not see it");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kill_resume)

BOOST_AUTO_TEST_CASE(cnn_fp32) { kill_and_resume({"cnn", false}, 1); }
BOOST_AUTO_TEST_CASE(cnn_amp) { kill_and_resume({"cnn", true}, 2); }
BOOST_AUTO_TEST_CASE(gpt_fp32) { kill_and_resume({"gpt", false}, 3); }
BOOST_AUTO_TEST_CASE(gpt_amp) { kill_and_resume({"gpt", true}, 4); }

BOOST_AUTO_TEST_CASE(each_piece_of_state_is_needed) {
  omission_is_caught({"cnn", false}, "loader");
  omission_is_caught({"cnn", false}, "optimizer");
  omission_is_caught({"cnn", false}, "scheduler");
  omission_is_caught({"cnn", true}, "scaler");
  omission_is_caught({"gpt", false}, "rng");  // dropout's masks
}

BOOST_AUTO_TEST_SUITE_END()
