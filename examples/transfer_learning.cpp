// transfer_learning — a frozen ResNet-18 backbone and a new head, trained
// with AMP through mg::train::Runner, the way the fine-tuning guides do it
// with torchvision:
//
//   auto net = mg::models::resnet18();
//   mg::models::load_weights(net, "resnet18.safetensors");  // scripts/convert_torch_checkpoint.py
//   net["fc"] = mg::nn::Linear(512, 5);                     // torch: model.fc = nn.Linear(512, 5)
//   net.freeze();  net["fc"].unfreeze();                    // only the head trains
//   mg::train::Runner runner(model, opt);
//   runner.scaler = mg::amp::GradScaler();                  // AMP: the one switch
//
// The images are Fashion-MNIST's, replicated to three channels and
// normalised as torchvision's pretrained models expect. Weights cannot be
// downloaded here, so without --weights the backbone is pretrained by this
// program: the whole ResNet-18 learns the first five classes (T-shirt,
// trouser, pullover, dress, coat); then, frozen, it serves the other five
// (sandal, shirt, sneaker, bag, ankle boot), which it never saw, and only a
// new head is trained on them. The same head on a random frozen backbone is
// the baseline: the difference is what the backbone's features carry.
//
//   transfer_learning                               # pretrain 1 epoch, transfer 2, baseline 2
//   transfer_learning --weights resnet18.safetensors   # torchvision's ImageNet weights instead
//   transfer_learning --limit-train 2048 --pretrain-epochs 1 --epochs 1   # a quick run
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mixgrad/mixgrad.hpp>
#include <string>
#include <vector>

namespace mg = mixgrad;
namespace po = boost::program_options;

namespace {

struct Options {
  std::string data_dir = std::string(mg::data::FashionMNIST::kDefaultRoot);
  std::string weights;  // a torchvision resnet18 state dict as safetensors; empty: pretrain here
  int pretrain_epochs = 1, epochs = 2, threads = 2;
  int64_t limit_train = 0, batch_size = 128;
  bool baseline = true;
};

// Grey [N, 1, 28, 28] in [0, 1] to RGB normalised with ImageNet's mean and
// standard deviation (torchvision's pretrained models' input), then the ResNet.
class GreyToRGB : public mg::nn::Module {
 public:
  mg::Tensor forward(const mg::Tensor& x) override {
    std::vector<mg::Tensor> channels;
    for (int c = 0; c < 3; ++c) channels.push_back((x - kMean[c]) * (1.0 / kStd[c]));
    return mg::F::concat(channels, 1);
  }
  std::string describe() const override { return "GreyToRGB"; }

 private:
  static constexpr double kMean[3] = {0.485, 0.456, 0.406};
  static constexpr double kStd[3] = {0.229, 0.224, 0.225};
};

// The samples of `data` whose label is in [first, first + 5), relabelled 0..4.
mg::data::TensorDataset five_classes(const mg::data::TensorDataset& data, int64_t first, int64_t limit) {
  const std::vector<int64_t> labels = data.labels().to_vector<int64_t>();
  std::vector<int64_t> index, relabelled;
  for (size_t i = 0; i < labels.size() && (limit == 0 || static_cast<int64_t>(index.size()) < limit); ++i)
    if (labels[i] >= first && labels[i] < first + 5) {
      index.push_back(static_cast<int64_t>(i));
      relabelled.push_back(labels[i] - first);
    }
  const auto n = static_cast<int64_t>(index.size());
  const mg::Tensor images = mg::F::index_select(data.images(), 0, mg::tensor(index, {n}));
  return mg::data::TensorDataset(images.contiguous(), mg::tensor(relabelled, {n}));
}

struct Data {
  mg::data::TensorDataset train, test;
};

// Trains `net` (a GreyToRGB + ResNet-18 Sequential) with AMP through the
// runner; with `frozen_backbone`, only `fc` trains and the backbone's batch
// norms stay in eval mode. Returns the test accuracy.
double train(mg::nn::Sequential& net, const Data& d, int epochs, bool frozen_backbone, const Options& o) {
  mg::nn::Module& resnet = net[1];
  if (frozen_backbone) {
    resnet.freeze();
    resnet["fc"].unfreeze();
  }
  mg::optim::SGD opt(net.trainable_parameters(), {.lr = frozen_backbone ? 0.05 : 0.02, .momentum = 0.9});
  mg::train::Runner runner(net, opt);
  runner.scaler = mg::amp::GradScaler();  // bf16 autocast on the CPU, fp16 on CUDA
  runner.add_loader("train", mg::data::DataLoader(d.train, {.batch_size = o.batch_size, .shuffle = true, .seed = 0}));
  runner.add_loader("test", mg::data::DataLoader(d.test, {.batch_size = 500}));
  const int64_t steps = runner.loader("train").size() * epochs;
  runner.scheduler = std::make_shared<mg::optim::CosineAnnealingLR>(opt, steps);
  runner.train_config({.epochs = epochs, .test_each_epoch = true});
  if (frozen_backbone)  // the backbone keeps its batch-norm statistics (the head has none)
    runner.on_epoch_begin([&](mg::train::Runner&, int64_t) { resnet.eval(); });
  runner.run();
  return runner.history().back().at("test_accuracy");
}

mg::nn::Sequential make_net(const Options& o) {
  auto resnet = mg::models::resnet18({.num_classes = 5});
  if (!o.weights.empty()) {
    auto imagenet = mg::models::resnet18();  // 1000 classes, as the file
    mg::models::load_weights(imagenet, o.weights);
    imagenet["fc"] = mg::nn::Linear(512, 5);
    return mg::nn::Sequential(GreyToRGB(), std::move(imagenet));
  }
  return mg::nn::Sequential(GreyToRGB(), std::move(resnet));
}

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  po::options_description desc("transfer_learning: a frozen ResNet-18 backbone and a new head, with AMP\n\nOptions");
  desc.add_options()("help,h", "show this help")(
      "weights", po::value(&o.weights), "torchvision resnet18 weights as safetensors (skips pretraining)")(
      "pretrain-epochs", po::value(&o.pretrain_epochs)->default_value(o.pretrain_epochs),
      "epochs of the whole network on classes 0-4")(
      "epochs", po::value(&o.epochs)->default_value(o.epochs), "epochs of the head on classes 5-9")(
      "batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "images per batch")(
      "limit-train", po::value(&o.limit_train)->default_value(o.limit_train),
      "at most N training images per five classes (0: all 30000)")(
      "no-baseline", "skip the random-backbone baseline")(
      "threads", po::value(&o.threads)->default_value(o.threads), "CPU threads")(
      "data-dir", po::value(&o.data_dir)->default_value(o.data_dir), "Fashion-MNIST's directory");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  if (vm.count("help")) {
    std::cout << desc;
    return std::nullopt;
  }
  po::notify(vm);
  o.baseline = !vm.count("no-baseline");
  if (o.epochs < 1 || o.pretrain_epochs < 0 || o.batch_size < 1 || o.limit_train < 0 || o.threads < 1)
    throw po::error("--epochs, --batch-size and --threads must be >= 1, the others >= 0");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Options> o;
  try {
    o = parse(argc, argv);
    if (!o) return 0;
  } catch (const po::error& e) {
    std::fprintf(stderr, "transfer_learning: %s\n", e.what());
    return 2;
  }
  try {
    mg::set_num_threads(o->threads);
    mg::manual_seed(0);
    const mg::data::FashionMNIST train_set(o->data_dir, mg::data::Split::train, {.normalize = false});
    const mg::data::FashionMNIST test_set(o->data_dir, mg::data::Split::test, {.normalize = false});
    const Data source{five_classes(train_set, 0, o->limit_train), five_classes(test_set, 0, 0)};
    const Data target{five_classes(train_set, 5, o->limit_train), five_classes(test_set, 5, 0)};
    std::printf("CPU: %s\n", mg::cpu::describe(mg::cpu::capabilities()).c_str());
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

    mg::nn::Sequential net = make_net(*o);
    if (o->weights.empty() && o->pretrain_epochs > 0) {
      std::printf("pretraining ResNet-18 on classes 0-4 (%lld images), %d epoch(s), bf16 AMP\n",
                  static_cast<long long>(source.train.size()), o->pretrain_epochs);
      const double acc = train(net, source, o->pretrain_epochs, false, *o);
      std::printf("  classes 0-4: test accuracy %.2f%% (%.0f s)\n", 100 * acc, seconds());
    }
    net[1]["fc"] = mg::nn::Linear(512, 5);  // the new head, for classes 5-9
    std::printf("transfer: frozen backbone, new head on classes 5-9 (%lld images), %d epoch(s)\n",
                static_cast<long long>(target.train.size()), o->epochs);
    const double transfer = train(net, target, o->epochs, true, *o);
    std::printf("  classes 5-9: test accuracy %.2f%% with the %s backbone (%.0f s)\n", 100 * transfer,
                o->weights.empty() ? "pretrained" : "loaded", seconds());
    if (o->baseline) {
      mg::manual_seed(1);
      Options random = *o;
      random.weights.clear();
      mg::nn::Sequential untrained = make_net(random);
      const double base = train(untrained, target, o->epochs, true, *o);
      std::printf("  classes 5-9: test accuracy %.2f%% with a random frozen backbone (the baseline)\n", 100 * base);
    }
    std::printf("done in %.0f s\n", seconds());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transfer_learning: %s\n", e.what());
    return 1;
  }
  return 0;
}
