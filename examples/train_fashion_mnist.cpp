// train_fashion_mnist — a small CNN on Fashion-MNIST in float32, written the
// MegEngine way: a GradManager records the forward pass, backward fills the
// parameters' gradients, the optimizer steps and clears them.
//
//   train_fashion_mnist                       # 3 epochs, SGD with a cosine learning-rate decay
//   train_fashion_mnist --limit-train 2048 --epochs 1   # a quick smoke run
//   train_fashion_mnist --help
//
// The data comes from `apt-get install dataset-fashion-mnist` (or --data-dir).
#include <boost/program_options.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <mixgrad/mixgrad.hpp>
#include <string>

namespace mg = mixgrad;
namespace po = boost::program_options;

namespace {

struct Args {
  int epochs = 3;
  int64_t batch_size = 128;
  double lr = 0.05;
  uint64_t seed = 0;
  int threads = 2;
  std::string data_dir = std::string(mg::data::FashionMNIST::kDefaultRoot);
  int64_t limit_train = 0;  // 0: the whole training set
  std::string schedule = "cosine";
};

// Returns the exit code when the program should stop now (--help: 0, a bad
// flag: 1), or -1 to go on.
int parse_args(int argc, char** argv, Args& a) {
  po::options_description desc("train_fashion_mnist: a CNN on Fashion-MNIST with SGD + momentum");
  desc.add_options()("help,h", "show this help")                                                  //
      ("epochs", po::value(&a.epochs)->default_value(a.epochs), "training epochs")               //
      ("batch-size", po::value(&a.batch_size)->default_value(a.batch_size), "images per step")  //
      ("lr", po::value(&a.lr)->default_value(a.lr, "0.05"), "SGD learning rate (momentum 0.9)")         //
      ("seed", po::value(&a.seed)->default_value(a.seed), "seed of initialisation and shuffling")  //
      ("threads", po::value(&a.threads)->default_value(a.threads), "CPU threads")               //
      ("data-dir", po::value(&a.data_dir)->default_value(a.data_dir), "directory of the .gz files")  //
      ("limit-train", po::value(&a.limit_train)->default_value(a.limit_train),
       "train on the first N images only (0: all)")  //
      ("schedule", po::value(&a.schedule)->default_value(a.schedule),
       "learning rate over the run: cosine (from lr down to 0, per step) or constant");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (a.schedule != "cosine" && a.schedule != "constant")
      throw po::invalid_option_value("--schedule " + a.schedule);
  } catch (const po::error& e) {
    std::cerr << "error: " << e.what() << "\n" << desc << "\n";
    return 1;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  return -1;
}

// 2 x [conv3x3 + batch norm + ReLU + 2x2 max pool], then a 2-layer MLP head:
// [N, 1, 28, 28] -> [N, 32, 14, 14] -> [N, 64, 7, 7] -> [N, 3136] -> [N, 10].
mg::nn::Sequential make_net() {
  namespace nn = mg::nn;
  return nn::Sequential(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(32, 64, 3, {.padding = 1}), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10));
}

// Fraction of correctly classified images, in eval mode (running batch-norm
// statistics) and without recording.
double accuracy(mg::nn::Module& net, mg::data::DataLoader& loader) {
  net.eval();
  int64_t correct = 0, total = 0;
  for (const auto& [x, y] : loader) {
    const auto predicted = mg::F::argmax(net(x), 1).to_vector<int64_t>();
    const auto labels = y.to_vector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
    total += static_cast<int64_t>(labels.size());
  }
  net.train();
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const int code = parse_args(argc, argv, args); code >= 0) return code;
  try {
    mg::set_num_threads(args.threads);
    mg::manual_seed(args.seed);

    mg::data::FashionMNIST train_set(args.data_dir, mg::data::Split::train);
    mg::data::FashionMNIST test_set(args.data_dir, mg::data::Split::test);
    mg::data::TensorDataset train_data = train_set;
    if (args.limit_train > 0 && args.limit_train < train_set.size())
      train_data = train_set.narrow(0, args.limit_train);
    mg::data::DataLoader train_loader(train_data, {.batch_size = args.batch_size, .shuffle = true, .seed = args.seed});
    mg::data::DataLoader test_loader(test_set, {.batch_size = 500});
    std::printf("Fashion-MNIST: %lld training images, %lld test images; batch %lld, lr %g (%s), %d threads\n",
                static_cast<long long>(train_data.size()), static_cast<long long>(test_set.size()),
                static_cast<long long>(args.batch_size), args.lr, args.schedule.c_str(), args.threads);

    auto net = make_net();
    mg::autodiff::GradManager gm;
    gm.attach(net.parameters());
    mg::optim::SGD opt(net.parameters(), {.lr = args.lr, .momentum = 0.9});

    // Cosine annealing: lr * (1 + cos(pi * step / total)) / 2, set before
    // each step through the optimizer's set_lr.
    const int64_t total_steps = static_cast<int64_t>(args.epochs) * train_loader.size();
    int64_t step = 0;
    auto lr_at = [&](int64_t s) {
      if (args.schedule == "constant") return args.lr;
      return 0.5 * args.lr * (1.0 + std::cos(3.14159265358979323846 * static_cast<double>(s) / total_steps));
    };

    for (int epoch = 1; epoch <= args.epochs; ++epoch) {
      net.train();
      const auto start = std::chrono::steady_clock::now();
      double loss_sum = 0.0;
      int64_t seen = 0;
      for (const auto& [x, y] : train_loader) {
        mg::Tensor loss;
        {
          auto recording = gm.record();  // `with gm:`
          loss = mg::F::cross_entropy(net(x), y);
          gm.backward(loss);
        }
        opt.set_lr(lr_at(step++));
        opt.step().clear_grad();
        loss_sum += loss.item<double>() * static_cast<double>(x.size(0));
        seen += x.size(0);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double acc = accuracy(net, test_loader);
      std::printf("epoch %d/%d  train loss %.4f  test accuracy %.2f%%  %.0f img/s  %.1f s\n", epoch, args.epochs,
                  loss_sum / static_cast<double>(seen), 100.0 * acc, static_cast<double>(seen) / seconds, seconds);
      std::fflush(stdout);
    }
  } catch (const mg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
