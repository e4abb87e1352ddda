// Benchmark: data-parallel scaling of the Fashion-MNIST CNN with AMP (bf16
// autocast + GradScaler), and how much of the gradient all-reduce hides
// behind backward. Not a test. Run it alone and under mpirun with the same
// global batch and one thread per process:
//
//   OMP_NUM_THREADS=1 build/tests/perf/bench_distributed --epochs 3
//   OMP_NUM_THREADS=1 mpirun -np 2 build/tests/perf/bench_distributed --epochs 3
//   OMP_NUM_THREADS=1 mpirun -np 2 build/tests/perf/bench_distributed --epochs 1 --bucket-kib 256
//   OMP_NUM_THREADS=1 mpirun -np 2 build/tests/perf/bench_distributed --epochs 1 --progress-thread-us 0
//
// --progress off attaches the reducer without its between-nodes hook
// (GradReducer::progress); --progress-thread-us sets the reducer's progress
// thread (ReducerOptions::progress_thread_us, 0: none). Both off, MPI
// advances the running buckets only at gradient-ready calls. In containers
// that refuse Open MPI's single-copy transport (CMA), add
// `-x OMPI_MCA_btl_vader_single_copy_mechanism=none`, as the tests do.
//
// Each run trains with the global batch (--batch, 128) split over the
// ranks, SGD (lr 0.05, momentum 0.9, cosine decay), prints per-epoch img/s
// (all ranks' images per second of training) and, at the end, the test
// accuracy (rank 0, after averaging BatchNorm statistics). Under mpirun it
// also prints two views of how much of the gradient all-reduce hides behind
// backward:
// - the timeline: one step's buckets (start, seen finished, end of
//   backward), and over all steps the part of each bucket's [start, finish]
//   before its backward ended. A bucket's finish is when the reducer next
//   looked (at a gradient-ready call, or in the after-backward wait), and
//   Open MPI moves a non-blocking collective's data only inside MPI calls,
//   so this view cannot tell a bucket that finished early from one that only
//   progressed when looked at: it is an upper bound.
// - the exposed wait: the time the last rank to end its backward then spends
//   in the after-backward wait, per step, against the same all-reduces run
//   back to back with nothing to hide behind. 1 - wait / alone is the share
//   actually hidden.
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
#include "cpu_line.hpp"

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
  bool progress = true;
  int64_t thread_us = dist::ReducerOptions{}.progress_thread_us;
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
    else if (k == "--progress") a.progress = std::strcmp(v, "off") != 0;
    else if (k == "--progress-thread-us") a.thread_us = std::atoll(v);
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
  perf::print_cpu_line();
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
    reducer = std::make_unique<dist::GradReducer>(
        group, "mean", dist::ReducerOptions{.bucket_bytes = a.bucket_kib * 1024, .progress_thread_us = a.thread_us});
    if (a.progress) {
      reducer->attach(gm, net.parameters());
    } else {  // the callback and the after-backward hook only
      dist::GradReducer& red = *reducer;
      gm.attach(net.parameters(),
                {[&red](const mg::Tensor& t, const mg::Tensor& g) { return red.on_grad_ready(t, g); }});
      gm.register_after_backward_callback([&red] { red.finish(); });
    }
    reducer->record_timeline(true);
  } else {
    gm.attach(net.parameters());
  }
  mg::optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  mg::amp::GradScaler scaler;
  if (W > 1) dist::sync_grad_scaler(group, scaler);

  if (r == 0)
    std::printf("bench_distributed: CNN, bf16 autocast + GradScaler, %d process(es) x batch %lld, %d thread(s) "
                "each, %lld training images, bucket %lld KiB, progress between backward nodes %s, progress "
                "thread every %lld us\n",
                W, static_cast<long long>(a.batch / W), mg::num_threads(), static_cast<long long>(train.size()),
                static_cast<long long>(a.bucket_kib), a.progress ? "on" : "off", static_cast<long long>(a.thread_us));
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
    std::printf("overlap (timeline): %.1f%% of all-reduce time hidden behind backward (%.3f of %.3f s, %zu bucket "
                "reductions)\n",
                busy > 0 ? 100.0 * hidden / busy : 0.0, hidden, busy, events.size());
  }
  if (reducer) {
    // The second view: what the step waited for after its backward (the
    // after-backward hook, until the last bucket was seen done), against
    // what the same buckets cost reduced back to back with no backward to
    // hide behind (ranks lined up by a barrier, so no skew is counted). A
    // rank that ends its backward early also waits for the others to end
    // theirs (skew, not communication); the rank that ended last waits for
    // communication only, so each step counts the least wait over the ranks.
    const auto& events = reducer->timeline();
    const int buckets = reducer->num_buckets();
    const size_t steps = events.size() / static_cast<size_t>(buckets);
    std::vector<double> waits(steps);
    for (size_t k = 0; k < steps; ++k) {
      double last = 0.0;
      for (int b = 0; b < buckets; ++b) last = std::max(last, events[k * buckets + b].finish);
      waits[k] = std::max(0.0, last - events[k * buckets].backward_end);
    }
    const auto all_waits =
        dist::all_gather(group, mg::tensor(waits, mg::Shape{static_cast<int64_t>(steps)})).to_vector<double>();
    double exposed = 0.0, skewed = 0.0;
    for (size_t k = 0; k < steps; ++k) {
      double least = all_waits[k];
      for (int q = 0; q < W; ++q) least = std::min(least, all_waits[q * steps + k]);
      exposed += least;
      skewed += waits[k];
    }
    exposed /= static_cast<double>(steps);
    skewed /= static_cast<double>(steps);
    std::vector<mg::Tensor> bufs;
    for (int b = 0; b < buckets; ++b) bufs.push_back(mg::zeros({events[b].bytes / 4}));
    const int reps = 30;
    double alone = 0.0;
    for (int i = 0; i < reps; ++i) {
      group.barrier();
      const auto t0 = Clock::now();
      for (auto& t : bufs) dist::all_reduce(group, t, dist::ReduceOp::mean);
      alone += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    alone /= reps;
    if (r == 0)
      std::printf("overlap (exposed wait): the last rank to end its backward then waits %.2f ms per step (rank 0: "
                  "%.2f ms, skew included); the same all-reduces alone take %.2f ms: %.1f%% hidden\n",
                  1e3 * exposed, 1e3 * skewed, 1e3 * alone,
                  alone > 0 ? 100.0 * std::max(0.0, 1.0 - exposed / alone) : 0.0);
  }
  return 0;
}
