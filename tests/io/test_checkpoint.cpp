// Checkpoints: a run stopped, saved, loaded into fresh objects and resumed
// ends bit-identical to a run never stopped; a bad checkpoint throws IOError
// naming the problem and changes nothing.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <memory>

#include "io/io_test_util.hpp"
#include "mixgrad/ops/creation.hpp"
#include "core/random_state.hpp"

namespace mg = mixgrad;
using io_test::bytes_of;
using io_test::throws_io_error;

namespace {

enum class Opt { sgd, adam };

// A small run with everything a checkpoint must restore: dropout and
// shuffling (the global generator), momentum or Adam moments, a GradScaler
// whose scale moves (growth_interval 2), bf16 autocast.
struct Run {
  std::shared_ptr<mg::data::TensorDataset> data;
  mg::nn::Sequential net;
  mg::data::DataLoader loader;
  mg::autodiff::GradManager gm;
  std::unique_ptr<mg::optim::Optimizer> opt;
  mg::amp::GradScaler scaler;
  int64_t step = 0;

  Run(Opt kind, uint64_t seed)
      : data(make_data()),
        net((mg::manual_seed(seed), mg::nn::Sequential(mg::nn::Linear(8, 16), mg::nn::ReLU(), mg::nn::Dropout(0.25),
                                                        mg::nn::Linear(16, 3)))),
        loader(std::shared_ptr<const mg::data::Dataset>(data), {.batch_size = 16, .shuffle = true}),
        scaler({.init_scale = 1024.0, .growth_interval = 2}) {
    gm.attach(net.parameters());
    if (kind == Opt::sgd)
      opt = std::make_unique<mg::optim::SGD>(net.parameters(), mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    else
      opt = std::make_unique<mg::optim::Adam>(net.parameters(), mg::optim::AdamOptions{.lr = 0.01});
  }

  // The data does not depend on the run's seed.
  static std::shared_ptr<mg::data::TensorDataset> make_data() {
    mg::manual_seed(12345);
    std::vector<int64_t> labels(64);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i * 7 % 3);
    return std::make_shared<mg::data::TensorDataset>(mg::normal({64, 8}), mg::tensor(labels, {64}));
  }

  void epoch() {
    for (const auto& [x, y] : loader) {
      {
        mg::amp::autocast scope(true, mg::DType::bfloat16);
        auto rec = gm.record();
        scaler.backward(gm, mg::F::cross_entropy(net(x), y));
      }
      opt->step().clear_grad();
      ++step;
    }
  }

  mg::io::Checkpoint parts() { return {.model = &net, .optimizer = opt.get(), .scaler = &scaler, .loader = &loader, .step = step}; }
};

// Everything a checkpoint restores, as bytes, to compare two runs or a run
// before and after a failed load.
std::vector<std::byte> fingerprint(Run& r) {
  std::vector<std::byte> out;
  auto add = [&](const std::vector<std::byte>& b) { out.insert(out.end(), b.begin(), b.end()); };
  for (const auto& [k, t] : r.net.state_dict()) add(bytes_of(t));
  for (const auto& [k, t] : r.opt->state_dict()) add(bytes_of(t));
  for (const auto& [k, t] : r.scaler.state_dict()) add(bytes_of(t));
  add(bytes_of(mg::tensor<int64_t>({r.loader.epoch(), static_cast<int64_t>(r.loader.seed())}, {2})));
  const auto rng = mg::random_state::get();
  add(bytes_of(mg::tensor<int64_t>({static_cast<int64_t>(rng.seed), static_cast<int64_t>(rng.counter)}, {2})));
  return out;
}

// Loads a checkpoint file, lets `edit` change its tensors and metadata, and
// writes it back (with a fresh checksum).
template <class F>
void rewrite(const std::filesystem::path& path, F edit) {
  mg::io::Metadata meta;
  mg::StateDict sd = mg::io::load_file(path, &meta);
  meta.erase(std::string(mg::io::kChecksumKey));
  edit(sd, meta);
  mg::io::save_file(sd, path, meta);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint)

BOOST_AUTO_TEST_CASE(resume_is_bit_identical) {
  for (Opt kind : {Opt::sgd, Opt::adam}) {
    BOOST_TEST_CONTEXT((kind == Opt::sgd ? "SGD momentum" : "Adam")) {
      io_test::TempDir dir;
      Run straight(kind, 1);
      for (int e = 0; e < 3; ++e) straight.epoch();
      const auto expected = fingerprint(straight);
      const int64_t expected_step = straight.step;

      std::filesystem::path saved;
      {
        Run first(kind, 1);
        first.epoch();
        saved = mg::io::save_checkpoint(dir.path, first.parts());
        BOOST_TEST(saved == mg::io::checkpoint_path(dir.path, first.step));
      }
      mg::manual_seed(777);
      mg::uniform({100});  // the generator moves on; the checkpoint must put it back
      Run resumed(kind, 2);  // another initialisation: the load must replace it
      BOOST_TEST((fingerprint(resumed) != expected));
      const auto info = mg::io::load_checkpoint(dir.path, resumed.parts());
      BOOST_TEST(info.path == saved);
      resumed.step = info.step;
      BOOST_TEST(resumed.step == 4);
      BOOST_TEST(resumed.loader.epoch() == 1);
      while (resumed.loader.epoch() < 3) resumed.epoch();
      BOOST_TEST(resumed.step == expected_step);
      BOOST_TEST((fingerprint(resumed) == expected));
      BOOST_TEST(resumed.scaler.scale_factor() == straight.scaler.scale_factor());
    }
  }
}

// A low dtype nobody chose is saved as "by_device" and restored unchosen, so
// CUDA inputs keep float16 after a resume; a chosen one, even the CPU's
// default, stays chosen.
BOOST_AUTO_TEST_CASE(autocast_low_dtype_left_to_the_device_stays_so) {
  io_test::TempDir dir;
  Run r(Opt::sgd, 3);
  mg::amp::low_prec_dtype.reset();
  const auto unset = mg::io::save_checkpoint(dir.path / "unset.safetensors", r.parts());
  mg::amp::low_prec_dtype = mg::DType::bfloat16;
  const auto chosen = mg::io::save_checkpoint(dir.path / "chosen.safetensors", r.parts());

  mg::io::load_checkpoint(unset, {});
  BOOST_TEST(!mg::amp::low_prec_dtype.is_set());
  BOOST_TEST(mg::amp::autocast_dtype(mg::DeviceType::cuda) == mg::DType::float16);
  mg::io::load_checkpoint(chosen, {});
  BOOST_TEST(mg::amp::low_prec_dtype.is_set());
  BOOST_TEST(mg::amp::autocast_dtype(mg::DeviceType::cuda) == mg::DType::bfloat16);
  mg::amp::low_prec_dtype.reset();
}

BOOST_AUTO_TEST_CASE(autocast_settings_and_user_metadata_round_trip) {
  io_test::TempDir dir;
  Run r(Opt::sgd, 3);
  mg::amp::enabled = true;
  mg::amp::low_prec_dtype = mg::DType::float16;
  auto parts = r.parts();
  parts.metadata = {{"model", "tiny"}};
  const auto path = mg::io::save_checkpoint(dir.path / "c.safetensors", parts);
  mg::amp::enabled = false;
  mg::amp::low_prec_dtype = mg::DType::bfloat16;
  const auto info = mg::io::load_checkpoint(path, {});
  BOOST_TEST(info.metadata.at("model") == "tiny");
  BOOST_TEST(mg::amp::enabled.load());
  BOOST_TEST(mg::amp::low_prec_dtype.load() == mg::DType::float16);
  BOOST_TEST(mg::amp::high_prec_dtype.load() == mg::DType::float32);
  mg::amp::enabled = false;
  mg::amp::low_prec_dtype.reset();
  BOOST_TEST(!mg::io::latest_checkpoint(dir.path).has_value());  // not named checkpoint-<step>
  BOOST_TEST(throws_io_error([&] { mg::io::load_checkpoint(dir.path, {}); }, {"no checkpoint-<step>.safetensors"}));
}

BOOST_AUTO_TEST_CASE(latest_checkpoint_picks_the_highest_step) {
  io_test::TempDir dir;
  Run r(Opt::sgd, 4);
  for (int64_t s : {5, 120, 30}) {
    auto parts = r.parts();
    parts.step = s;
    mg::io::save_checkpoint(dir.path, parts);
  }
  BOOST_TEST(*mg::io::latest_checkpoint(dir.path) == dir.path / "checkpoint-00000120.safetensors");
  BOOST_TEST(mg::io::load_checkpoint(dir.path, {}).step == 120);
}

// Each bad checkpoint throws IOError with the file and the problem in the
// message, and the model, optimizer, scaler, loader and generator stay as
// they were.
BOOST_AUTO_TEST_CASE(bad_checkpoints_change_nothing) {
  io_test::TempDir dir;
  const auto good = dir.path / "good.safetensors";
  {
    Run src(Opt::sgd, 5);
    src.epoch();
    mg::io::save_checkpoint(good, src.parts());
  }
  const auto good_bytes = io_test::read_all(good);
  const auto path = dir.path / "bad.safetensors";

  struct Case {
    std::string name;
    std::function<void()> corrupt;  // writes `path`
    std::vector<std::string> message;
  };
  auto edit = [&](auto f) {
    return [&, f] {
      io_test::write_all(path, good_bytes);
      rewrite(path, f);
    };
  };
  const std::vector<Case> cases = {
      {"truncated",
       [&] { io_test::write_all(path, {good_bytes.begin(), good_bytes.end() - 10}); },
       {"bad.safetensors", "truncated"}},
      {"corrupt data",
       [&] {
         auto b = good_bytes;
         b[b.size() - 100] ^= std::byte{1};
         io_test::write_all(path, b);
       },
       {"bad.safetensors", "checksum mismatch"}},
      {"wrong shape",
       edit([](mg::StateDict& sd, mg::io::Metadata&) { sd.insert_or_assign("model.0.weight", mg::zeros({16, 9})); }),
       {"bad.safetensors", "model", "'0.weight'", "float32[16, 9]", "float32[16, 8]"}},
      {"wrong dtype",
       edit([](mg::StateDict& sd, mg::io::Metadata&) {
         sd.insert_or_assign("model.3.bias", mg::zeros({3}, mg::DType::float16));
       }),
       {"bad.safetensors", "'3.bias'", "float16[3]", "float32[3]"}},
      {"missing model key", edit([](mg::StateDict& sd, mg::io::Metadata&) { sd.erase("model.0.bias"); }),
       {"bad.safetensors", "missing keys", "0.bias"}},
      {"unexpected model key",
       edit([](mg::StateDict& sd, mg::io::Metadata&) { sd.insert("model.9.weight", mg::zeros({1})); }),
       {"bad.safetensors", "unexpected keys", "9.weight"}},
      {"optimizer buffer shape",
       edit([](mg::StateDict& sd, mg::io::Metadata&) {
         sd.insert_or_assign("optimizer.state.0.momentum_buffer", mg::zeros({2}));
       }),
       {"bad.safetensors", "optimizer", "state.0.momentum_buffer"}},
      {"optimizer of another kind",
       edit([](mg::StateDict&, mg::io::Metadata& m) { m["mixgrad.optimizer"] = "Adam"; }),
       {"bad.safetensors", "Adam state", "optimizer is SGD"}},
      {"missing scaler key", edit([](mg::StateDict& sd, mg::io::Metadata&) { sd.erase("scaler.scale_factor"); }),
       {"bad.safetensors", "GradScaler", "scale_factor"}},
      {"scaler value",
       edit([](mg::StateDict& sd, mg::io::Metadata&) {
         sd.insert_or_assign("scaler.scale_factor", mg::scalar(-1.0, mg::DType::float64));
       }),
       {"bad.safetensors", "GradScaler"}},
      {"scaler shape",
       edit([](mg::StateDict& sd, mg::io::Metadata&) {
         sd.insert_or_assign("scaler.growth_interval", mg::tensor({2.0, 2.0}, {2}, mg::DType::float64));
       }),
       {"bad.safetensors", "'scaler.growth_interval'", "expected a 0-d tensor"}},
      {"bad step", edit([](mg::StateDict&, mg::io::Metadata& m) { m["mixgrad.step"] = "4x"; }),
       {"bad.safetensors", "mixgrad.step", "'4x'"}},
      {"missing rng", edit([](mg::StateDict&, mg::io::Metadata& m) { m.erase("mixgrad.rng.counter"); }),
       {"bad.safetensors", "mixgrad.rng.counter", "missing"}},
      {"bad autocast dtype",
       edit([](mg::StateDict&, mg::io::Metadata& m) { m["mixgrad.autocast.low_prec_dtype"] = "float8"; }),
       {"bad.safetensors", "float8"}},
      {"not a checkpoint", edit([](mg::StateDict&, mg::io::Metadata& m) { m.erase("mixgrad.format"); }),
       {"bad.safetensors", "mixgrad.format"}},
  };
  Run target(Opt::sgd, 6);
  target.epoch();  // optimizer state, a moved scale and epoch 1: all must survive
  mg::amp::enabled = false;
  for (const Case& c : cases)
    BOOST_TEST_CONTEXT(c.name) {
      c.corrupt();
      const auto before = fingerprint(target);
      BOOST_TEST(throws_io_error([&] { mg::io::load_checkpoint(path, target.parts()); }, c.message));
      BOOST_TEST((fingerprint(target) == before));
      BOOST_TEST(!mg::amp::enabled.load());
    }
  // The good file still loads into the same objects.
  BOOST_CHECK_NO_THROW(mg::io::load_checkpoint(good, target.parts()));
}

// The scaler's entries as typed 0-d tensors (counts int64), and a file of the
// earlier form (every scaler entry a 0-d float64) still loads.
BOOST_AUTO_TEST_CASE(scaler_state_is_a_state_dict_and_old_files_load) {
  io_test::TempDir dir;
  const auto path = dir.path / "scaler.safetensors";
  mg::amp::GradScaler saved({.init_scale = 4096.0, .growth_interval = 7});
  for (int i = 0; i < 3; ++i) saved.update();
  mg::io::save_checkpoint(path, {.scaler = &saved, .rng = false, .autocast = false});
  const mg::StateDict all = mg::io::load_file(path);
  BOOST_TEST(all.at("scaler.scale_factor").dtype() == mg::DType::float64);
  BOOST_TEST(all.at("scaler._growth_tracker").dtype() == mg::DType::int64);
  BOOST_TEST(all.at("scaler._growth_tracker").item<int64_t>() == 3);

  rewrite(path, [](mg::StateDict& sd, mg::io::Metadata&) {
    for (const std::string key : {"scaler.growth_interval", "scaler._growth_tracker"})
      sd.insert_or_assign(key, mg::scalar(sd.at(key).item<double>(), mg::DType::float64));
  });
  BOOST_TEST(mg::io::load_file(path).at("scaler.growth_interval").dtype() == mg::DType::float64);
  mg::amp::GradScaler loaded;
  mg::io::load_checkpoint(path, {.scaler = &loaded, .rng = false, .autocast = false});
  BOOST_TEST(loaded.scale_factor() == 4096.0);
  BOOST_TEST(loaded.growth_tracker() == 3);
  BOOST_TEST(loaded.options().growth_interval == 7);
}

// A model's int8 / uint8 buffers (quantisation codes, pixel lookup tables)
// are saved as I8 / U8 and restored bit for bit.
BOOST_AUTO_TEST_CASE(int8_and_uint8_buffers_round_trip) {
  struct Codes : mg::nn::Module {
    mg::Tensor lut, zero_point;
    Codes() {
      lut = register_buffer("lut", mg::tensor<uint8_t>({0, 7, 128, 255}, {4}));
      zero_point = register_buffer("zero_point", mg::tensor<int8_t>({-128, -3, 127}, {3}));
    }
    mg::Tensor forward(const mg::Tensor& x) override { return x; }
  };
  io_test::TempDir dir;
  Codes saved;
  const auto path = mg::io::save_checkpoint(dir.path / "codes.safetensors", {.model = &saved, .rng = false});
  const mg::StateDict file = mg::io::load_file(path);
  BOOST_TEST(file.at("model.lut").dtype() == mg::DType::uint8);
  BOOST_TEST(file.at("model.zero_point").dtype() == mg::DType::int8);

  Codes loaded;
  std::fill_n(loaded.lut.data<uint8_t>(), 4, uint8_t{1});
  std::fill_n(loaded.zero_point.data<int8_t>(), 3, int8_t{1});
  mg::io::load_checkpoint(path, {.model = &loaded, .rng = false, .autocast = false});
  BOOST_TEST(loaded.lut.to_vector<int>() == std::vector<int>({0, 7, 128, 255}), boost::test_tools::per_element());
  BOOST_TEST(loaded.zero_point.to_vector<int>() == std::vector<int>({-128, -3, 127}), boost::test_tools::per_element());
  BOOST_TEST(loaded.lut.dtype() == mg::DType::uint8);
}

BOOST_AUTO_TEST_CASE(parts_left_out_are_neither_saved_nor_required) {
  io_test::TempDir dir;
  Run r(Opt::adam, 7);
  const auto path = mg::io::save_checkpoint(dir.path / "model_only.safetensors", {.model = &r.net, .rng = false});
  const auto keys = mg::io::load_file(path).keys();
  for (const auto& k : keys) BOOST_TEST(k.starts_with("model."));
  BOOST_TEST(throws_io_error([&] { mg::io::load_checkpoint(path, {.optimizer = r.opt.get()}); },
                             {"model_only.safetensors", "mixgrad.optimizer"}));
  BOOST_TEST(throws_io_error([&] { mg::io::load_checkpoint(path, {.scaler = &r.scaler}); },
                             {"model_only.safetensors", "no GradScaler state"}));
  BOOST_CHECK_NO_THROW(mg::io::load_checkpoint(path, {.model = &r.net, .rng = false, .autocast = false}));
}

// The scheduler slot: its position and options round-trip, and a resumed
// run follows the same lr sequence (PyTorch saves scheduler.state_dict()
// beside the optimizer's for the same reason).
BOOST_AUTO_TEST_CASE(lr_scheduler_round_trips) {
  io_test::TempDir dir;
  Run a(Opt::sgd, 21);
  mg::optim::CosineAnnealingLR sched_a(*a.opt, 10, 0.001);
  for (int i = 0; i < 3; ++i) sched_a.step();
  const auto path = mg::io::save_checkpoint(dir.path, {.optimizer = a.opt.get(), .scheduler = &sched_a, .step = 3});
  const auto keys = mg::io::load_file(path).keys();
  BOOST_TEST((std::find(keys.begin(), keys.end(), "scheduler.last_epoch") != keys.end()));

  Run b(Opt::sgd, 22);
  mg::optim::CosineAnnealingLR sched_b(*b.opt, 10, 0.001);
  BOOST_TEST(b.opt->lr() == 0.1);
  mg::io::load_checkpoint(dir.path, {.optimizer = b.opt.get(), .scheduler = &sched_b, .rng = false, .autocast = false});
  BOOST_TEST(sched_b.last_epoch() == 3);
  BOOST_TEST(b.opt->lr() == a.opt->lr());
  sched_a.step();
  sched_b.step();
  BOOST_TEST(b.opt->lr() == a.opt->lr());

  // Another kind of schedule, or a file without one: IOError, nothing changed.
  Run c(Opt::sgd, 23);
  mg::optim::StepLR step_lr(*c.opt, 2);
  BOOST_TEST(throws_io_error(
      [&] { mg::io::load_checkpoint(path, {.optimizer = c.opt.get(), .scheduler = &step_lr, .rng = false}); },
      {"CosineAnnealingLR", "StepLR"}));
  BOOST_TEST(step_lr.last_epoch() == 0);
  BOOST_TEST(c.opt->lr() == 0.1);
  const auto bare = mg::io::save_checkpoint(dir.path / "bare.safetensors", {.optimizer = a.opt.get(), .step = 4});
  BOOST_TEST(throws_io_error([&] { mg::io::load_checkpoint(bare, {.scheduler = &sched_b, .rng = false}); },
                             {"bare.safetensors", "mixgrad.scheduler"}));
  BOOST_TEST(sched_b.last_epoch() == 4);
}

BOOST_AUTO_TEST_SUITE_END()
