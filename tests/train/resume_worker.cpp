// resume_worker — one training run of the kill-and-resume test
// (test_kill_resume.cpp), in a process of its own so that it can be killed.
//
//   resume_worker --model cnn|gpt --amp 0|1 --dir DIR --out FILE
//                 [--kill-after-step N] [--kill-in-write N] [--omit PART]
//
// Trains a small CNN (the examples' make_cnn, on random 28x28 images) or a
// small GPT (the char-GPT example's model, dropout 0.1, on random tokens)
// for two epochs through mg::train::Runner, writing a checkpoint after every
// optimizer step into DIR, and continues from DIR's latest checkpoint when
// there is one. At the end it writes FILE: the model's state, the
// optimizer's, the scaler's and the metrics of every epoch, the things a
// resumed run must reproduce bit for bit.
//
// --kill-after-step N: SIGKILL itself after step N (before its checkpoint).
// --kill-in-write N: SIGKILL itself half way through writing its N-th checkpoint.
// --omit PART: on resuming, leave PART as a fresh process has it, as if the
//   checkpoint did not hold it (loader, rng, scaler, optimizer, scheduler);
//   the test checks that each omission is caught.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <filesystem>
#include <mixgrad/mixgrad.hpp>
#include <string>

#include "io/file.hpp"
#include "models.hpp"
#include "train_char_gpt/model.hpp"

namespace mg = mixgrad;

namespace {

struct Args {
  std::string model = "cnn", dir, out, omit;
  bool amp = false;
  int64_t kill_after_step = 0, kill_in_write = 0;
};

int g_writes_to_kill = 0;  // the checkpoint write to die in (1-based); 0: none
int g_writes = 0;

void kill_in_write(const std::filesystem::path& target, uint64_t written) {
  if (target.filename().string().starts_with("checkpoint-") && written == 0) ++g_writes;
  if (g_writes == g_writes_to_kill && written > 0) raise(SIGKILL);  // the header is written, the tensors not
}

std::vector<int64_t> random_ints(size_t n, int64_t below, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> v(n);
  for (auto& x : v) x = static_cast<int64_t>(gen() % static_cast<uint32_t>(below));
  return v;
}

// Tokens of a random "text" of 64 symbols: inputs [N, 16], targets shifted by one.
mg::data::TensorDataset token_windows(int64_t n) {
  const std::vector<int64_t> text = random_ints(static_cast<size_t>(n * 16 + 1), 64, 1);
  const std::vector<int64_t> x(text.begin(), text.end() - 1), y(text.begin() + 1, text.end());
  return mg::data::TensorDataset(mg::tensor(x, {n, 16}), mg::tensor(y, {n, 16}));
}

mg::data::TensorDataset images(int64_t n) {
  return mg::data::TensorDataset(mg::normal({n, 1, 28, 28}), mg::tensor(random_ints(static_cast<size_t>(n), 10, 2), {n}));
}

// The default step (the CNN) or the GPT's (logits [B, T, V] against targets
// [B, T]); with AMP, step 5's loss is made infinite: a skipped step and a
// backoff of the scale happen in every run.
struct WorkerRunner : mg::train::Runner {
  WorkerRunner(mg::nn::Module& m, mg::optim::Optimizer& o, bool gpt) : Runner(m, o), gpt_(gpt) {}
  mg::train::StepOutput train_step(const mg::data::Batch& b) override {
    mg::Tensor loss;
    if (gpt_) {
      const mg::Tensor logits = model()(b.images);
      const int64_t v = logits.size(2);
      loss = mg::F::cross_entropy(mg::F::reshape(logits, {-1, v}), mg::F::reshape(b.labels, {-1}));
    } else {
      loss = Runner::train_step(b).at("loss");
    }
    if (scaler && global_step() == 4) loss = loss * std::numeric_limits<double>::infinity();
    return {{"loss", loss}};
  }
  bool gpt_;
};

void omit(const std::string& part, mg::train::Runner& runner, const mg::amp::GradScalerOptions& scaler_options) {
  if (part == "loader") {  // the epoch alone, as checkpoints held before positions
    runner.loader("train").set_epoch(runner.loader("train").position().epoch);
  } else if (part == "rng") {
    mg::manual_seed(12345);
  } else if (part == "scaler") {
    runner.scaler = mg::amp::GradScaler(scaler_options);
  } else if (part == "optimizer") {  // no momentum buffers
    const mg::StateDict fresh = mg::optim::SGD(runner.model().parameters(), {.lr = 0.05, .momentum = 0.9}).state_dict();
    runner.optimizer().load_state_dict(fresh);
    runner.scheduler->load_state_dict(runner.scheduler->state_dict());  // its lr again
  } else if (part == "scheduler") {
    mg::optim::SGD other(runner.model().parameters(), {.lr = 0.05});
    runner.scheduler->load_state_dict(mg::optim::CosineAnnealingLR(other, 64).state_dict());
  } else if (!part.empty()) {
    std::fprintf(stderr, "resume_worker: --omit %s: unknown part\n", part.c_str());
    std::exit(2);
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--amp") a.amp = v == "1";
    else if (k == "--dir") a.dir = v;
    else if (k == "--out") a.out = v;
    else if (k == "--omit") a.omit = v;
    else if (k == "--kill-after-step") a.kill_after_step = std::stoll(v);
    else if (k == "--kill-in-write") a.kill_in_write = std::stoll(v);
    else {
      std::fprintf(stderr, "resume_worker: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  mg::set_num_threads(1);
  mg::manual_seed(7);
  const bool gpt = a.model == "gpt";
  mg::data::TensorDataset data = gpt ? token_windows(96) : images(120);
  std::shared_ptr<mg::nn::Module> net;
  if (gpt)
    net = std::make_shared<gpt::CharGPT>(gpt::Config{.vocab = 64, .block = 16, .layers = 2, .heads = 2, .embd = 32,
                                                     .dropout = 0.1});
  else
    net = std::make_shared<mg::nn::Sequential>(models::make_cnn());
  mg::optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  auto runner = std::make_unique<WorkerRunner>(*net, opt, gpt);
  // A small initial scale that grows every 3 steps: the scale changes during the run.
  const mg::amp::GradScalerOptions scaler_options{.init_scale = 4.0, .growth_interval = 3};
  if (a.amp) runner->scaler = mg::amp::GradScaler(scaler_options);
  runner->scheduler = std::make_shared<mg::optim::CosineAnnealingLR>(opt, 64);
  runner->add_loader("train", mg::data::DataLoader(data, {.batch_size = 16, .shuffle = true}));
  runner->train_config({.epochs = 2, .checkpoint_dir = a.dir, .checkpoint_every = 1, .progress_bar = false,
                        .verbose = false});
  if (a.kill_after_step > 0)
    runner->on_step_end([&](mg::train::Runner&, const mg::train::StepInfo& s) {
      if (s.step == a.kill_after_step) raise(SIGKILL);
    });
  g_writes_to_kill = static_cast<int>(a.kill_in_write);
  if (a.kill_in_write > 0) mg::io::detail::set_write_hook(kill_in_write);
  if (auto latest = mg::io::latest_checkpoint(a.dir)) {
    runner->load_checkpoint(*latest);
    omit(a.omit, *runner, scaler_options);
  }
  runner->run();

  mg::StateDict out;
  for (const auto& [k, t] : net->state_dict()) out.insert("model." + k, t);
  for (const auto& [k, t] : opt.state_dict()) out.insert("optimizer." + k, t);
  if (runner->scaler)
    for (const auto& [k, t] : runner->scaler->state_dict()) out.insert("scaler." + k, t);
  std::vector<double> losses;
  for (const auto& m : runner->history()) losses.push_back(m.at("train_loss"));
  out.insert("train_loss", mg::tensor(losses, {static_cast<int64_t>(losses.size())}));
  out.insert("steps", mg::scalar(static_cast<double>(runner->global_step()), mg::DType::float64));
  mg::io::save_file(out, a.out);
  return 0;
}
