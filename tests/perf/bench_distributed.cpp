// Benchmark: data-parallel scaling of the Fashion-MNIST CNN with AMP (bf16
// autocast + GradScaler), and how much of the gradient all-reduce hides
// behind backward. Not a test. Run it alone and under mpirun with the same
// global batch and one thread per process:
//
//   OMP_NUM_THREADS=1 build/tests/perf/bench_distributed --epochs 3
//   OMP_NUM_THREADS=1 mpirun -np 2 build/tests/perf/bench_distributed --epochs 3
//   OMP_NUM_THREADS=1 mpirun -np 2 build/tests/perf/bench_distributed --epochs 1 --bucket-kib 256
//
// Each run trains with the global batch (--batch, 128) split over the
// ranks, SGD (lr 0.05, momentum 0.9, cosine decay), prints per-epoch img/s
// (all ranks' images per second of training) and, at the end, the test
// accuracy (rank 0, after averaging BatchNorm statistics). Under mpirun it
// also prints a timeline of one step's buckets and the share of all-reduce
// time hidden behind backward over all steps: for each bucket, the part of
// [start, finish] before the backward ended, over the whole [start, finish].
// A bucket's finish is when the reducer next saw it done (it tests running
// buckets at each gradient-ready call and waits at the end), so the share is
// a lower bound.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "mixgrad/distributed.hpp"
#include "mixgrad/mixgrad.hpp"
#include "models.hpp"

namespace mg = mixgrad;
namespace dist = mixgrad::distributed;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  int epochs = 3;
  int64_t batch = 128;  // global
  int64_t limit = 0;
  int64_t bucket_kib = dist::kDefaultBucketBytes / 1024;
  uint64_t seed = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--epochs") a.epochs = std::atoi(v);
    else if (k == "--batch") a.batch = std::atoll(v);
    else if (k == "--limit-train") a.limit = std::atoll(v);
    else if (k == "--bucket-kib") a.bucket_kib = std::atoll(v);
    else if (k == "--seed") a.seed = std::strtoull(v, nullptr, 10);
    else {
      std::fprintf(stderr, "bench_distributed: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

double accuracy(mg::nn::Module& net, const mg::data::TensorDataset& test) {
  mg::autodiff::no_grad guard;
  mg::amp::autocast scope(true);
  net.eval();
  mg::data::DataLoader loader(test, {.batch_size = 500});
  int64_t correct = 0, total = 0;
  for (const auto& [x, y] : loader) {
    const auto pred = mg::F::argmax(net(x), 1).to_vector<int64_t>();
    const auto lab = y.to_vector<int64_t>();
    for (size_t i = 0; i < lab.size(); ++i) correct += pred[i] == lab[i];
    total += static_cast<int64_t>(lab.size());
  }
  net.train();
  return 100.0 * static_cast<double>(correct) / static_cast<double>(total);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  auto group = dist::init_process_group();
  const int W = group.world_size(), r = group.rank();
  if (a.batch % W != 0) {
    if (r == 0) std::fprintf(stderr, "bench_distributed: --batch %lld does not split over %d ranks\n",
                             static_cast<long long>(a.batch), W);
    return 2;
  }
  mg::manual_seed(a.seed);
  mg::data::TensorDataset train = mg::data::FashionMNIST(std::string(mg::data::FashionMNIST::kDefaultRoot),
                                                         mg::data::Split::train);
  if (a.limit > 0 && a.limit < train.size()) train = train.narrow(0, a.limit);
  const mg::data::TensorDataset test = mg::data::FashionMNIST(std::string(mg::data::FashionMNIST::kDefaultRoot),
                                                              mg::data::Split::test);
  auto shard = std::make_shared<dist::ShardedDataset>(std::make_shared<mg::data::TensorDataset>(train),
                                                      dist::DistributedSampler(r, W, train.size(), {.seed = a.seed}));
  mg::data::DataLoader loader(std::shared_ptr<const mg::data::Dataset>(shard), {.batch_size = a.batch / W});

  auto net = models::make_cnn();
  mg::autodiff::GradManager gm;
  std::unique_ptr<dist::GradReducer> reducer;
  if (W > 1) {
    dist::broadcast_parameters(group, net);
    reducer = std::make_unique<dist::GradReducer>(group, "mean",
                                                  dist::ReducerOptions{.bucket_bytes = a.bucket_kib * 1024});
    reducer->attach(gm, net.parameters());
    reducer->record_timeline(true);
  } else {
    gm.attach(net.parameters());
  }
  mg::optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  mg::amp::GradScaler scaler;
  if (W > 1) dist::sync_grad_scaler(group, scaler);

  if (r == 0)
    std::printf("bench_distributed: CNN, bf16 autocast + GradScaler, %d process(es) x batch %lld, %d thread(s) "
                "each, %lld training images, bucket %lld KiB\n",
                W, static_cast<long long>(a.batch / W), mg::num_threads(), static_cast<long long>(train.size()),
                static_cast<long long>(a.bucket_kib));
  const int64_t steps_per_epoch = loader.size(), total = steps_per_epoch * a.epochs;
  int64_t step = 0;
  double train_seconds = 0.0, backward_seconds = 0.0;
  int64_t images_total = 0;
  std::vector<double> backward_starts;  // on the reducer's clock, per step
  for (int epoch = 0; epoch < a.epochs; ++epoch) {
    shard->set_epoch(epoch);
    int64_t images = 0;
    const auto t0 = Clock::now();
    for (const auto& [x, y] : loader) {
      opt.set_lr(0.5 * 0.05 * (1.0 + std::cos(std::numbers::pi * static_cast<double>(step) / total)));
      {
        mg::amp::autocast ac(true);
        auto rec = gm.record();
        auto loss = mg::F::cross_entropy(net(x), y);
        const auto b0 = Clock::now();
        if (reducer) backward_starts.push_back(reducer->now());
        scaler.backward(gm, loss);
        backward_seconds += std::chrono::duration<double>(Clock::now() - b0).count();
      }
      opt.step().clear_grad();
      images += x.size(0) * W;
      ++step;
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    train_seconds += s;
    images_total += images;
    if (r == 0) std::printf("epoch %d: %.0f img/s (%.1f s)\n", epoch + 1, static_cast<double>(images) / s, s);
  }
  if (W > 1) dist::average_buffers(group, net);
  const double acc = r == 0 ? accuracy(net, test) : 0.0;
  if (r == 0) {
    std::printf("result: %d process(es): %.0f img/s over %d epoch(s), test accuracy %.2f%%, backward %.1f%% of "
                "training time\n",
                W, static_cast<double>(images_total) / train_seconds, a.epochs, acc,
                100.0 * backward_seconds / train_seconds);
  }
  if (reducer && r == 0) {
    // Overlap over every step; the timeline of the middle step.
    const auto& events = reducer->timeline();
    const int buckets = reducer->num_buckets();
    double hidden = 0.0, busy = 0.0;
    for (const auto& e : events) {
      busy += e.finish - e.start;
      hidden += std::max(0.0, std::min(e.finish, e.backward_end) - e.start);
    }
    const size_t mid = backward_starts.size() / 2;
    std::printf("timeline of step %zu (ms from the start of its backward; %d bucket(s)):\n", mid + 1, buckets);
    const double b0 = backward_starts[mid];
    for (int b = 0; b < buckets; ++b) {
      const auto& e = events[mid * buckets + b];
      std::printf("  bucket %d (%7.1f KiB): all-reduce %7.2f -> %7.2f, backward ended %7.2f\n", e.bucket,
                  static_cast<double>(e.bytes) / 1024.0, 1e3 * (e.start - b0), 1e3 * (e.finish - b0),
                  1e3 * (e.backward_end - b0));
    }
    std::printf("overlap: %.1f%% of all-reduce time hidden behind backward (%.3f of %.3f s, %zu bucket "
                "reductions)\n",
                busy > 0 ? 100.0 * hidden / busy : 0.0, hidden, busy, events.size());
  }
  return 0;
}
