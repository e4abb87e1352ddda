// mg::train::Runner: what a step sees (autocast and the scaler as one
// switch), accumulation and clipping equal to the hand-written loop, the
// scheduler, callbacks, early stopping, the metrics files, checkpoints, and
// bad input: a typed error naming the call or file, and nothing changed.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mixgrad/mixgrad.hpp>
#include <random>
#include <string>
#include <vector>

namespace mg = mixgrad;
namespace fs = std::filesystem;

namespace {

// 64 samples of 4 features, the label the sign of their sum: learnable.
mg::data::TensorDataset toy_data(int64_t n = 64, uint32_t seed = 3) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(static_cast<size_t>(n * 4));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int j = 0; j < 4; ++j) s += x[static_cast<size_t>(i * 4 + j)] = d(gen);
    y[static_cast<size_t>(i)] = s > 0;
  }
  return mg::data::TensorDataset(mg::tensor(x, {n, 4}), mg::tensor(y, {n}));
}

mg::nn::Sequential toy_net(int64_t hidden = 8) {
  mg::manual_seed(5);
  return mg::nn::Sequential(mg::nn::Linear(4, hidden), mg::nn::ReLU(), mg::nn::Linear(hidden, 2));
}

mg::data::DataLoader toy_loader(int64_t n = 64, int64_t batch = 8) {
  return mg::data::DataLoader(toy_data(n), {.batch_size = batch, .shuffle = true, .seed = 11});
}

std::vector<std::vector<float>> values(const mg::nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const auto& p : m.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("mixgrad_runner_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

mg::train::TrainConfig quiet(mg::train::TrainConfig c) {
  c.progress_bar = false;
  c.verbose = false;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(runner)

BOOST_AUTO_TEST_CASE(trains_and_evaluates_with_the_default_steps) {
  auto net = toy_net();
  mg::optim::SGD opt(net.parameters(), {.lr = 0.2, .momentum = 0.9});
  mg::train::Runner runner(net, opt);
  runner.add_loader("train", toy_loader());
  runner.add_loader("val", mg::data::DataLoader(toy_data(32, 9), {.batch_size = 16}));
  runner.add_loader("test", mg::data::DataLoader(toy_data(32, 10), {.batch_size = 16}));
  runner.train_config(quiet({.epochs = 8}));
  runner.run();
  BOOST_REQUIRE_EQUAL(runner.history().size(), 8u);
  BOOST_TEST(runner.global_step() == 64);
  const auto& first = runner.history().front();
  const auto& last = runner.history().back();
  BOOST_TEST(last.at("train_loss") < 0.5 * first.at("train_loss"));
  BOOST_TEST(last.at("val_accuracy") > 0.8);
  BOOST_TEST(runner.final_metrics().at("test_accuracy") > 0.8);
  BOOST_TEST(!runner.history().front().contains("test_accuracy"));  // test runs at the end only
}

// The step runs in autocast exactly when the scaler is set, and the backward
// is the scaler's: a scale that grows every step doubles each step.
BOOST_AUTO_TEST_CASE(the_scaler_is_the_amp_switch) {
  struct Probe : mg::train::Runner {
    using Runner::Runner;
    std::vector<bool> autocast;
    std::vector<mg::DType> dtypes;
    mg::train::StepOutput train_step(const mg::data::Batch& b) override {
      autocast.push_back(mg::amp::is_autocast_enabled());
      const mg::Tensor out = model()(b.images);
      dtypes.push_back(out.dtype());
      return {{"loss", mg::F::cross_entropy(out, b.labels)}};
    }
  };
  for (bool amp : {false, true}) {
    auto net = toy_net();
    mg::optim::SGD opt(net.parameters(), {.lr = 0.1});
    Probe runner(net, opt);
    if (amp) runner.scaler = mg::amp::GradScaler({.init_scale = 4.0, .growth_interval = 1});
    runner.add_loader("train", toy_loader());
    runner.train_config(quiet({.epochs = 1}));
    runner.run();
    BOOST_REQUIRE_EQUAL(runner.autocast.size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      BOOST_TEST(runner.autocast[i] == amp);
      BOOST_TEST((runner.dtypes[i] == (amp ? mg::DType::bfloat16 : mg::DType::float32)));
    }
    if (amp) BOOST_TEST(runner.scaler->scale_factor() == 4.0 * 256.0);
  }
}

// Gradient accumulation and clipping through the runner give, bit for bit,
// the parameters of the loop a user would write by hand.
BOOST_AUTO_TEST_CASE(accumulation_and_clipping_equal_the_hand_written_loop) {
  auto a = toy_net();
  mg::optim::SGD opt_a(a.parameters(), {.lr = 0.3, .momentum = 0.9});
  mg::train::Runner runner(a, opt_a);
  runner.add_loader("train", toy_loader(60, 8));  // 8 batches, the last of 4 samples: groups 3, 3, 2
  runner.train_config(quiet({.epochs = 2, .accumulate = 3, .clip_grad_norm = 0.05}));
  runner.run();
  BOOST_TEST(runner.global_step() == 6);

  auto b = toy_net();
  mg::optim::SGD opt_b(b.parameters(), {.lr = 0.3, .momentum = 0.9});
  mg::autodiff::GradManager gm;
  gm.attach(b.parameters());
  mg::data::DataLoader loader = toy_loader(60, 8);
  for (int epoch = 0; epoch < 2; ++epoch) {
    int64_t i = 0;
    for (const auto& [x, y] : loader) {
      const int64_t first = i / 3 * 3, group = std::min<int64_t>(3, 8 - first);
      {
        auto rec = gm.record();
        gm.backward(mg::F::cross_entropy(b(x), y) * (1.0 / static_cast<double>(group)));
      }
      if (++i == first + group) {
        mg::optim::clip_grad_norm(b.parameters(), 0.05);
        opt_b.step().clear_grad();
      }
    }
  }
  BOOST_TEST((values(a) == values(b)));
}

BOOST_AUTO_TEST_CASE(scheduler_callbacks_and_stop) {
  auto net = toy_net();
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1});
  mg::train::Runner runner(net, opt);
  runner.scheduler = std::make_shared<mg::optim::CosineAnnealingLR>(opt, 40);
  runner.add_loader("train", toy_loader());
  runner.train_config(quiet({.epochs = 5}));
  int64_t steps = 0, epochs = 0, began = 0;
  std::vector<double> lrs;
  runner.on_epoch_begin([&](mg::train::Runner&, int64_t e) { began += e; });
  runner.on_step_end([&](mg::train::Runner&, const mg::train::StepInfo& s) {
    ++steps;
    lrs.push_back(s.lr());
    BOOST_TEST(s.step == steps);
  });
  runner.on_epoch_end([&](mg::train::Runner& r, const mg::train::Metrics& m) {
    BOOST_TEST(m.at("epoch") == static_cast<double>(++epochs));
    if (epochs == 3) r.stop();
  });
  runner.run();
  BOOST_TEST(epochs == 3);
  BOOST_TEST(steps == 24);
  BOOST_TEST(began == 1 + 2 + 3);
  // StepInfo.lr is the lr after the step's scheduler advance: lr_at(step).
  for (size_t i = 0; i < lrs.size(); ++i)
    BOOST_TEST(lrs[i] == runner.scheduler->lr_at(static_cast<int64_t>(i) + 1), boost::test_tools::tolerance(1e-12));
}

// A runner whose every fifth step (from the second) has NaN gradients: the
// loss gets sqrt(0 * sum(w)), which adds 0 to it and 0 * inf to w's gradient.
struct OverflowingRunner : mg::train::Runner {
  using Runner::Runner;
  int64_t calls = 0;
  mg::train::StepOutput train_step(const mg::data::Batch& b) override {
    mg::train::StepOutput out = Runner::train_step(b);
    if (++calls % 5 == 2) out["loss"] = out["loss"] + mg::F::sqrt(mg::F::sum(model().parameters().front()) * 0.0);
    return out;
  }
};

// The runner reads the device every log_every steps: that changes when the
// values reach the host, never what they are. The schedule, stepped on the
// device, must not count the overflowed steps.
BOOST_AUTO_TEST_CASE(log_every_changes_when_values_are_read_not_what_they_are) {
  struct Run {
    std::string csv;
    std::vector<mg::train::Metrics> history;
    std::vector<std::vector<float>> params;
    std::vector<double> losses, lrs;
    std::vector<int> skipped;
    int64_t schedule_epoch = 0;
    bool on_device = false;
  };
  const auto run = [](int64_t log_every, const fs::path& dir) {
    auto net = toy_net();
    mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
    OverflowingRunner runner(net, opt);
    runner.scaler = mg::amp::GradScaler({.growth_interval = 4});
    runner.scheduler = std::make_shared<mg::optim::CosineAnnealingLR>(opt, 30);
    runner.add_loader("train", toy_loader());
    runner.train_config(quiet({.epochs = 3, .metrics_csv = dir / "run.csv", .log_every = log_every}));
    Run r;
    runner.on_step_end([&](mg::train::Runner&, const mg::train::StepInfo& s) {
      r.losses.push_back(s.loss());
      r.lrs.push_back(s.lr());
      r.skipped.push_back(s.skipped() ? 1 : 0);
    });
    runner.run();
    std::ifstream in(dir / "run.csv");
    r.csv.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    r.history = runner.history();
    for (auto& m : r.history)
      for (const char* timing : {"seconds", "img_per_s", "eval_seconds"}) m.erase(timing);
    r.params = values(net);
    r.schedule_epoch = runner.scheduler->last_epoch();
    r.on_device = runner.scheduler->on_device();
    return r;
  };
  const Run a = run(1, temp_dir("log_every_1")), b = run(7, temp_dir("log_every_7"));
  BOOST_TEST(a.csv == b.csv);
  BOOST_TEST((a.history == b.history));  // every metric but the timings, bit for bit
  BOOST_TEST((a.params == b.params));
  BOOST_TEST(a.losses == b.losses, boost::test_tools::per_element());
  BOOST_TEST(a.lrs == b.lrs, boost::test_tools::per_element());
  BOOST_TEST(a.skipped == b.skipped, boost::test_tools::per_element());
  BOOST_TEST(a.on_device);
  int64_t skipped = 0;
  for (int k : a.skipped) skipped += k;
  BOOST_TEST(skipped == 5);
  BOOST_TEST(a.csv.size() > 0u);
  BOOST_TEST_REQUIRE(a.skipped.size() == 24u);
  BOOST_TEST(a.schedule_epoch == 24 - skipped);
  double in_history = 0;
  for (const auto& m : a.history) in_history += m.at("skipped_steps");
  BOOST_TEST(in_history == static_cast<double>(skipped));
  // Each step's lr is the closed form at the count of the steps taken so far.
  mg::Tensor w = mg::zeros(mg::Shape{1});
  mg::optim::SGD probe({w}, {.lr = 0.1});
  const mg::optim::CosineAnnealingLR closed(probe, 30);
  int64_t taken = 0;
  for (size_t i = 0; i < a.lrs.size(); ++i) {
    taken += 1 - a.skipped[i];
    BOOST_TEST(a.lrs[i] == closed.lr_at(taken));
  }
}

BOOST_AUTO_TEST_CASE(early_stopping_ends_the_run) {
  auto net = toy_net();
  mg::optim::SGD opt(net.parameters(), {.lr = 0.2});
  mg::train::Runner runner(net, opt);
  runner.add_loader("train", toy_loader());
  // The training loss falls every epoch: monitored as if higher were better, it never improves.
  runner.train_config(quiet({.epochs = 10, .early_stopping = mg::train::EarlyStopping{
                                               .monitor = "train_loss", .patience = 2, .maximize = true}}));
  runner.run();
  BOOST_TEST(runner.history().size() == 3u);
}

BOOST_AUTO_TEST_CASE(metrics_files_and_kept_checkpoints) {
  const fs::path dir = temp_dir("csv");
  auto net = toy_net();
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1});
  mg::train::Runner runner(net, opt);
  runner.add_loader("train", toy_loader());
  runner.add_loader("val", mg::data::DataLoader(toy_data(16, 9), {.batch_size = 16}));
  runner.train_config(quiet({.epochs = 2, .checkpoint_dir = dir / "ckpt", .checkpoint_every = 3,
                             .keep_checkpoints = 2, .metrics_csv = dir / "run.csv"}));
  runner.run();
  auto lines = [](const fs::path& p) {
    std::ifstream in(p);
    std::vector<std::string> v;
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  };
  const auto steps = lines(dir / "run.csv"), epochs = lines(dir / "run.epochs.csv");
  BOOST_REQUIRE_EQUAL(steps.size(), 17u);
  BOOST_TEST(steps[0] == "step,epoch,loss,scale_factor,lr,skipped");
  BOOST_TEST(steps[16].starts_with("16,2,"));
  BOOST_REQUIRE_EQUAL(epochs.size(), 3u);
  BOOST_TEST(epochs[0].starts_with("epoch,"));
  BOOST_TEST(epochs[0].find("val_accuracy") != std::string::npos);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "ckpt")) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  BOOST_TEST((files == std::vector<std::string>{"checkpoint-00000015.safetensors", "checkpoint-00000016.safetensors"}));
}

// max_steps stops mid-epoch and leaves a checkpoint; resume continues to the
// same parameters as a run that went straight through (in one process here;
// the SIGKILL test does it across processes).
BOOST_AUTO_TEST_CASE(stop_mid_epoch_and_resume) {
  const fs::path dir = temp_dir("resume");
  auto train = [&](int64_t max_steps, bool resume) {
    auto net = toy_net();
    mg::optim::Adam opt(net.parameters(), {.lr = 0.01});
    mg::train::Runner runner(net, opt);
    runner.add_loader("train", toy_loader());
    runner.train_config(quiet({.epochs = 2, .checkpoint_dir = resume ? dir : fs::path(), .resume = resume,
                               .max_steps = max_steps}));
    runner.run();
    return std::make_pair(values(net), runner.history());
  };
  const auto straight = train(0, false);
  train(5, true);  // steps 1-5, a checkpoint at 5 (mid-epoch 1)
  const auto resumed = train(0, true);
  BOOST_TEST((resumed.first == straight.first));
  BOOST_REQUIRE_EQUAL(resumed.second.size(), 2u);
  BOOST_TEST(resumed.second[0].at("train_loss") == straight.second[0].at("train_loss"));
  BOOST_TEST(resumed.second[1].at("train_loss") == straight.second[1].at("train_loss"));
}

BOOST_AUTO_TEST_CASE(bad_calls_are_typed_errors_that_change_nothing) {
  auto net = toy_net();
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1});
  mg::train::Runner runner(net, opt);
  BOOST_CHECK_THROW(runner.run(), mg::StateError);  // no train loader
  try {
    runner.run();
  } catch (const mg::StateError& e) {
    BOOST_TEST(std::string(e.what()).find("add_loader(\"train\"") != std::string::npos);
  }
  runner.add_loader("train", toy_loader());
  BOOST_CHECK_THROW(runner.add_loader("train", toy_loader(32)), mg::StateError);
  BOOST_TEST(runner.loader("train").dataset().size() == 64);  // the first one stays
  BOOST_CHECK_THROW(runner.add_loader("validation", toy_loader()), mg::ValueError);
  BOOST_TEST(!runner.has_loader("validation"));
  runner.train_config(quiet({.epochs = 2}));
  BOOST_CHECK_THROW(runner.train_config({.accumulate = 0}), mg::ValueError);
  BOOST_CHECK_THROW(runner.train_config({.clip_grad_norm = -1.0}), mg::ValueError);
  BOOST_CHECK_THROW(runner.train_config({.resume = true}), mg::ValueError);  // no checkpoint_dir
  BOOST_TEST(runner.config().epochs == 2);
  struct NoLoss : mg::train::Runner {
    using Runner::Runner;
    mg::train::StepOutput train_step(const mg::data::Batch& b) override {
      return {{"error", mg::F::cross_entropy(model()(b.images), b.labels)}};
    }
  };
  NoLoss no_loss(net, opt);
  no_loss.add_loader("train", toy_loader());
  no_loss.train_config(quiet({}));
  const auto before = values(net);
  BOOST_CHECK_THROW(no_loss.run(), mg::StateError);
  BOOST_TEST((values(net) == before));
}

// A checkpoint of another model, of another data set size, truncated,
// corrupted, or not a runner's: IOError naming the file, nothing changed.
BOOST_AUTO_TEST_CASE(checkpoints_that_do_not_fit_change_nothing) {
  const fs::path dir = temp_dir("bad");
  {
    auto net = toy_net();
    mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
    mg::train::Runner runner(net, opt);
    runner.scaler = mg::amp::GradScaler();
    runner.add_loader("train", toy_loader());
    runner.train_config(quiet({.epochs = 1, .max_steps = 3}));
    runner.run();
    runner.save_checkpoint(dir / "good.safetensors");
  }
  const auto bytes = [&] {
    std::ifstream in(dir / "good.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto write = [&](const std::string& name, const std::string& data) {
    std::ofstream(dir / name, std::ios::binary) << data;
    return dir / name;
  };
  std::string corrupt = bytes;
  corrupt[corrupt.size() - 20] ^= 0x5a;
  mg::io::save_checkpoint(dir / "plain.safetensors", {.model = nullptr, .step = 3});

  struct Case {
    fs::path file;
    int64_t hidden, samples;
    std::string says;
  };
  const std::vector<Case> cases = {
      {dir / "good.safetensors", 16, 64, "model"},
      {dir / "good.safetensors", 8, 48, "samples"},
      {write("truncated.safetensors", bytes.substr(0, bytes.size() / 2)), 8, 64, "truncated.safetensors"},
      {write("corrupt.safetensors", corrupt), 8, 64, "corrupt.safetensors"},
      {dir / "plain.safetensors", 8, 64, "not a checkpoint of a Runner"},
  };
  for (const Case& c : cases) {
    auto net = toy_net(c.hidden);
    mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
    mg::train::Runner runner(net, opt);
    runner.scaler = mg::amp::GradScaler({.init_scale = 2.0});
    runner.add_loader("train", toy_loader(c.samples));
    const auto params = values(net);
    const auto opt_state = opt.state_dict();
    try {
      runner.load_checkpoint(c.file);
      BOOST_ERROR("loading " << c.file << " did not throw");
    } catch (const mg::IOError& e) {
      const std::string what = e.what();
      BOOST_TEST(what.find(c.file.filename().string()) != std::string::npos, what);
      BOOST_TEST(what.find(c.says) != std::string::npos, what);
    }
    BOOST_TEST((values(net) == params));
    BOOST_TEST(opt.state_dict().size() == opt_state.size());
    BOOST_TEST(runner.scaler->scale_factor() == 2.0);
    BOOST_TEST(runner.global_step() == 0);
    BOOST_TEST((runner.loader("train").position() == mg::data::LoaderPosition{0, 0}));
  }
}

BOOST_AUTO_TEST_SUITE_END()
