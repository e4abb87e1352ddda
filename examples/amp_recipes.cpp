// The AMP recipes users bring, each training the Fashion-MNIST CNN the same
// way (SGD with momentum, cosine learning rate, bfloat16 autocast on the CPU,
// float16 on CUDA), so their accuracies compare with `scripts/train.sh`'s:
//
//   amp_recipes --recipe automatic     MegEngine's automatic gear: scaler.backward(gm, loss)
//   amp_recipes --recipe manual        MegEngine's manual gear: gm.backward(loss, dy = scale), unscale, update
//   amp_recipes --recipe pytorch       gm.backward(scaler.scale(loss)); scaler.step(opt); scaler.update()
//   amp_recipes --recipe apex-O1       amp::initialize(net, opt, {.opt_level = "O1"}) and amp::scale_loss
//   amp_recipes --recipe apex-O2       16-bit model, float32 batch norm and master weights
//   amp_recipes --recipe apex-O3       pure 16-bit (apex's speed baseline; no scaling)
//   amp_recipes --recipe apex-two-loss O1 with num_losses = 2: each half batch its own loss_id and scaler
//
//   amp_recipes --recipe pytorch --epochs 1 --limit-train 4096   # a quick run
//
// It prints the test accuracy after every epoch and, last, a line
// `recipe NAME accuracy A` that docs/recipes.md quotes. docs/recipes.md
// shows each recipe beside the guide it comes from.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <numbers>
#include <optional>
#include <string>

#include <mixgrad/mixgrad.hpp>

#include "models.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;

namespace {

struct Options {
  std::string recipe = "pytorch";
  int epochs = 3;
  int64_t limit_train = 0;  // 0: all 60,000
  int64_t batch_size = 128;
  double lr = 0.05;
  uint64_t seed = 0;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--recipe" && has_value) o.recipe = argv[++i];
    else if (a == "--epochs" && has_value) o.epochs = std::atoi(argv[++i]);
    else if (a == "--limit-train" && has_value) o.limit_train = std::atoll(argv[++i]);
    else if (a == "--batch-size" && has_value) o.batch_size = std::atoll(argv[++i]);
    else if (a == "--lr" && has_value) o.lr = std::atof(argv[++i]);
    else if (a == "--seed" && has_value) o.seed = std::strtoull(argv[++i], nullptr, 10);
    else return false;
  }
  return o.epochs > 0 && o.batch_size > 0 && o.lr > 0;
}

// What every recipe trains with: the model, its GradManager and optimizer,
// and for apex's recipes the handle of amp::initialize.
struct Training {
  mg::nn::Sequential net = models::make_cnn();
  mg::autodiff::GradManager gm;
  mg::optim::SGD opt{net.parameters(), {.lr = 0.05, .momentum = 0.9}};
  std::optional<mg::amp::Amp> amp;
  Training() { gm.attach(net.parameters()); }
};

// One optimizer step on a batch, the recipe's way.
using Step = std::function<void(const mg::Tensor& x, const mg::Tensor& y)>;

Step automatic_gear(Training& t, mg::amp::GradScaler& scaler) {
  return [&](const mg::Tensor& x, const mg::Tensor& y) {
    {
      mg::amp::autocast scope;
      auto rec = t.gm.record();
      scaler.backward(t.gm, F::cross_entropy(t.net(x), y));  // scale, backward, unscale, update
    }
    t.opt.step().clear_grad();
  };
}

Step manual_gear(Training& t, mg::amp::GradScaler& scaler) {
  return [&](const mg::Tensor& x, const mg::Tensor& y) {
    {
      mg::amp::autocast scope;
      auto rec = t.gm.record();
      mg::Tensor loss = F::cross_entropy(t.net(x), y);
      t.gm.backward(loss, mg::full_like(loss, scaler.scale_factor()));  // MegEngine: dy = scale
    }
    scaler.unscale(t.gm.attached_tensors());
    scaler.update();
    t.opt.step().clear_grad();
  };
}

Step pytorch_recipe(Training& t, mg::amp::GradScaler& scaler) {
  return [&](const mg::Tensor& x, const mg::Tensor& y) {
    {
      mg::amp::autocast scope;
      auto rec = t.gm.record();
      t.gm.backward(scaler.scale(F::cross_entropy(t.net(x), y)));
    }
    scaler.step(t.opt);
    scaler.update();
    t.opt.clear_grad();
  };
}

// apex's loop: initialize once, then `with amp.scale_loss(loss, optimizer)
// as scaled_loss: scaled_loss.backward()` around the backward.
Step apex_recipe(Training& t, const std::string& opt_level) {
  t.amp.emplace(mg::amp::initialize(t.net, t.opt, {.opt_level = opt_level}));
  return [&](const mg::Tensor& x, const mg::Tensor& y) {
    t.opt.clear_grad();
    {
      auto rec = t.gm.record();
      mg::Tensor loss = F::cross_entropy(t.net(x), y);  // x float32: an O2 / O3 model casts it
      mg::amp::scale_loss(loss, t.opt, [&](const mg::Tensor& scaled_loss) { t.gm.backward(scaled_loss); });
    }
    t.opt.step();  // skipped on the device after an overflow
  };
}

// apex's several losses (num_losses, loss_id), here two half batches, each
// with its own loss scaler, whose gradients add up for one step.
Step apex_two_losses(Training& t) {
  t.amp.emplace(mg::amp::initialize(t.net, t.opt, {.opt_level = "O1", .num_losses = 2}));
  return [&](const mg::Tensor& x, const mg::Tensor& y) {
    t.opt.clear_grad();
    const int64_t half = x.shape()[0] / 2;
    for (int id = 0; id < 2; ++id) {
      const int64_t start = id * half, length = id == 0 ? half : x.shape()[0] - half;
      auto rec = t.gm.record();
      mg::Tensor loss = F::cross_entropy(t.net(F::narrow(x, 0, start, length)), F::narrow(y, 0, start, length));
      loss = F::mul(loss, static_cast<double>(length) / static_cast<double>(x.shape()[0]));  // the batch's mean
      mg::amp::scale_loss(loss, t.opt, [&](const mg::Tensor& scaled_loss) { t.gm.backward(scaled_loss); }, id);
    }
    t.opt.step();
  };
}

using RecipeFactory = std::function<Step(Training&, mg::amp::GradScaler&)>;
const std::map<std::string, RecipeFactory>& recipes() {
  static const std::map<std::string, RecipeFactory> all = {
      {"automatic", automatic_gear},
      {"manual", manual_gear},
      {"pytorch", pytorch_recipe},
      {"apex-O1", [](Training& t, mg::amp::GradScaler&) { return apex_recipe(t, "O1"); }},
      {"apex-O2", [](Training& t, mg::amp::GradScaler&) { return apex_recipe(t, "O2"); }},
      {"apex-O3", [](Training& t, mg::amp::GradScaler&) { return apex_recipe(t, "O3"); }},
      {"apex-two-loss", [](Training& t, mg::amp::GradScaler&) { return apex_two_losses(t); }},
  };
  return all;
}

double test_accuracy(mg::nn::Sequential& net, const mg::data::FashionMNIST& test) {
  mg::autodiff::no_grad guard;
  mg::amp::autocast scope;  // AMP at inference: the same autocast, no scaler
  net.eval();
  mg::data::DataLoader loader(test, {.batch_size = 1000});
  int64_t right = 0;
  for (const auto& [x, y] : loader) {
    const auto p = F::argmax(net(x), 1).to_vector<int64_t>(), l = y.to_vector<int64_t>();
    for (size_t i = 0; i < p.size(); ++i) right += p[i] == l[i];
  }
  net.train();
  return 100.0 * static_cast<double>(right) / static_cast<double>(test.size());
}

}  // namespace

int run(const Options& o, const mg::data::FashionMNIST& train, const mg::data::FashionMNIST& test);

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: amp_recipes [--recipe automatic|manual|pytorch|apex-O1|apex-O2|apex-O3|apex-two-loss]\n"
                 "                   [--epochs N] [--limit-train N]\n"
                 "                   [--batch-size N] [--lr X] [--seed N]\n");
    return 2;
  }
  if (!recipes().contains(o.recipe)) {
    std::fprintf(stderr, "amp_recipes: unknown recipe '%s'\n", o.recipe.c_str());
    return 2;
  }
  mg::manual_seed(o.seed);
  std::optional<mg::data::FashionMNIST> train, test;
  try {
    train.emplace(mg::data::Split::train);
    test.emplace(mg::data::Split::test);
  } catch (const mg::IOError& e) {
    std::fprintf(stderr, "amp_recipes: %s\n(apt-get install dataset-fashion-mnist)\n", e.what());
    return 77;  // the data set is not installed: a skip for the test suite
  }
  return run(o, *train, *test);
}

int run(const Options& o, const mg::data::FashionMNIST& train, const mg::data::FashionMNIST& test) {
  mg::data::TensorDataset train_set = train;
  if (o.limit_train > 0 && o.limit_train < train.size()) train_set = train.narrow(0, o.limit_train);
  mg::data::DataLoader loader(train_set, {.batch_size = o.batch_size, .shuffle = true});
  Training t;
  mg::amp::GradScaler scaler;
  const Step step = recipes().at(o.recipe)(t, scaler);
  const int64_t total = loader.size() * o.epochs;
  int64_t done = 0;
  double accuracy = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    for (const auto& [x, y] : loader) {
      t.opt.set_lr(0.5 * o.lr * (1.0 + std::cos(std::numbers::pi * static_cast<double>(done++) / total)));
      step(x, y);
    }
    accuracy = test_accuracy(t.net, test);
    const double scale = t.amp ? t.amp->loss_scale(0) : scaler.scale_factor();
    std::printf("epoch %d  test accuracy %.2f %%  scale %g\n", epoch, accuracy, scale);
  }
  std::printf("recipe %s accuracy %.2f\n", o.recipe.c_str(), accuracy);
  return accuracy > 50.0 ? 0 : 1;  // it learned
}
