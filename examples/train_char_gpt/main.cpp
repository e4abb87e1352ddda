// train_char_gpt — the second program to run: a character-level GPT trained
// on the English of Debian's `fortunes` package, then asked to write. The
// step is PyTorch's AMP recipe for transformers, unscale -> clip -> step:
//
//   { mg::amp::autocast ac(true, bf16); auto rec = gm.record();
//     loss = F::cross_entropy(net(x), y);
//     scaler.backward(gm, loss, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
//   }  // scaled, not unscaled yet
//   scaler.unscale(gm.attached_tensors());        // one fused pass, sets the overflow flag
//   mg::optim::clip_grad_norm(params, 1.0);       // on the true gradients
//   opt.step();                                   // skipped where the flag is set
//   sched.step(scaler);                           // a skipped step does not advance the schedule
//   scaler.update(); opt.clear_grad();
//
//   train_char_gpt                      # bf16 autocast on the CPU (fp16 + GradScaler on CUDA)
//   train_char_gpt --precision fp32     # float32 throughout
//   train_char_gpt --steps 200 --sample 200 --prompt "The meaning of life"
//   train_char_gpt --kv-cache 0         # sample without the KV cache (the whole window per character)
//   train_char_gpt --save ckpt --stop-after 500 && train_char_gpt --save ckpt --resume ckpt
//   train_char_gpt --help
//
// The text comes from `apt-get install fortunes` (or --data-dir).
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mixgrad/mixgrad.hpp>
#include <random>
#include <string>
#include <vector>

#include "train_char_gpt/model.hpp"
#include "train_char_gpt/text.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  gpt::Config model{.block = 128};
  int64_t steps = 2500, batch = 32, warmup = 100, eval_interval = 250, eval_batches = 20, stop_after = 0;
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, clip = 1.0;
  std::string precision = "auto", device = "cpu", data_dir = "/usr/share/games/fortunes", metrics, save, resume;
  std::string prompt = "\n";
  int64_t sample = 400, top_k = 20, threads = 2, dtr_mib = 0;
  double temperature = 0.8;
  bool kv_cache = true;
  uint64_t seed = 1337;
};

int parse(int argc, char** argv, Options& o) {
  po::options_description d("train_char_gpt: a character-level GPT on the fortunes corpus\nOptions");
  // clang-format off
  d.add_options()
    ("help,h", "show this help and exit")
    ("steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps")
    ("batch-size", po::value(&o.batch)->default_value(o.batch), "sequences per step")
    ("block", po::value(&o.model.block)->default_value(o.model.block), "context length in characters")
    ("layers", po::value(&o.model.layers)->default_value(o.model.layers), "transformer layers")
    ("heads", po::value(&o.model.heads)->default_value(o.model.heads), "attention heads")
    ("embd", po::value(&o.model.embd)->default_value(o.model.embd), "model width (a multiple of --heads)")
    ("dropout", po::value(&o.model.dropout)->default_value(o.model.dropout), "dropout in training")
    ("checkpoint", po::value(&o.model.checkpoint)->implicit_value("full")->value_name("MODE"),
     "activation checkpointing per layer, the same gradients for less memory: full (alone: keep each layer's "
     "input only and recompute the layer in the backward), attention (keep attention's results), products "
     "(keep the linears' and attention's), alternate (every other linear's and attention's)")
    ("dtr", po::value(&o.dtr_mib)->value_name("MIB"),
     "dynamic rematerialization: each layer a dtr::segment, evicted (and recomputed in the backward) while the "
     "tensors exceed MIB MiB; the same gradients")
    ("lr", po::value(&o.lr)->default_value(o.lr), "peak learning rate (AdamW)")
    ("min-lr", po::value(&o.min_lr)->default_value(o.min_lr), "learning rate at the end of the cosine")
    ("warmup", po::value(&o.warmup)->default_value(o.warmup), "linear warm-up steps")
    ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay), "AdamW's decoupled weight decay, on weight matrices and embeddings")
    ("clip", po::value(&o.clip)->default_value(o.clip), "gradient norm clipping (0: off)")
    ("precision", po::value(&o.precision)->default_value(o.precision),
     "auto (bf16 autocast on the CPU, fp16 + GradScaler on CUDA), fp32, bf16 or fp16")
    ("device", po::value(&o.device)->default_value(o.device), "cpu, cuda or cuda:N")
    ("eval-interval", po::value(&o.eval_interval)->default_value(o.eval_interval), "steps between validation losses")
    ("eval-batches", po::value(&o.eval_batches)->default_value(o.eval_batches), "batches per validation loss")
    ("sample", po::value(&o.sample)->default_value(o.sample), "characters to write at the end (0: none)")
    ("prompt", po::value<std::string>(), "text the sample starts from (default: a new line)")
    ("temperature", po::value(&o.temperature)->default_value(o.temperature), "sampling temperature")
    ("top-k", po::value(&o.top_k)->default_value(o.top_k), "sample among the k likeliest characters (0: all)")
    ("kv-cache", po::value(&o.kv_cache)->default_value(o.kv_cache),
     "sample with a KV cache per layer (0: the whole window through the model per character)")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seed of the initialisation, the batches and the sample")
    ("threads", po::value(&o.threads)->default_value(o.threads), "CPU threads")
    ("data-dir", po::value(&o.data_dir)->default_value(o.data_dir), "folder of plain-text files")
    ("metrics", po::value(&o.metrics)->value_name("FILE.csv"), "write step, loss, val_loss, lr, scale, tokens/s")
    ("save", po::value(&o.save)->value_name("DIR"), "checkpoint at every validation")
    ("resume", po::value(&o.resume)->value_name("DIR"), "continue from the latest checkpoint in DIR")
    ("stop-after", po::value(&o.stop_after)->default_value(o.stop_after), "stop after this step (0: run all)");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, d), vm);
    if (vm.count("help")) {
      std::cout << d << "\n";
      return 0;
    }
    po::notify(vm);
    if (vm.count("prompt")) o.prompt = vm["prompt"].as<std::string>();
    auto require = [](bool ok, const char* what) {
      if (!ok) throw po::error(what);
    };
    require(o.sample == 0 || !o.prompt.empty(), "--prompt must not be empty (the sample continues it)");
    require(o.steps >= 1 && o.batch >= 1 && o.model.block >= 2, "--steps, --batch-size and --block must be positive");
    require(o.dtr_mib >= 0, "--dtr must be positive");
    o.model.dtr = o.dtr_mib > 0;
    require(o.model.layers >= 1 && o.model.heads >= 1 && o.model.embd % o.model.heads == 0,
            "--embd must be a positive multiple of --heads");
    require(o.lr > 0 && o.min_lr >= 0 && o.warmup >= 0 && o.warmup < o.steps, "bad --lr, --min-lr or --warmup");
    require(o.precision == "auto" || o.precision == "fp32" || o.precision == "bf16" || o.precision == "fp16",
            "--precision must be auto, fp32, bf16 or fp16");
    try {
      (void)mg::parse_device(o.device);
    } catch (const mg::ValueError&) {
      throw po::error("--device must be cpu, cuda or cuda:N (got '" + o.device + "')");
    }
    require(o.threads >= 1 && o.eval_interval >= 1 && o.eval_batches >= 1, "--threads and --eval-* must be positive");
  } catch (const po::error& e) {
    std::cerr << "train_char_gpt: " << e.what() << "\nRun train_char_gpt --help for the options.\n";
    return 2;
  }
  return -1;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// The windows of `seed` as int64 tensors [rows, block] on `dev`: inputs and targets.
std::pair<mg::Tensor, mg::Tensor> batch_tensors(const gpt::Corpus& c, const std::vector<int64_t>& split, int64_t rows,
                                                 int64_t block, uint64_t seed, mg::Device dev) {
  gpt::Windows w = c.windows(split, rows, block, seed);
  return {mg::tensor<int64_t>(w.x, {rows, block}).to(dev), mg::tensor<int64_t>(w.y, {rows, block}).to(dev)};
}

/// Mean cross-entropy over `batches` fixed batches of `split`: eval mode,
/// nothing recorded, the training precision.
double evaluate(gpt::CharGPT& net, const gpt::Corpus& c, const std::vector<int64_t>& split, const Options& o,
                bool autocast, mg::DType low, mg::Device dev) {
  mg::autodiff::no_grad guard;
  mg::amp::autocast ac(autocast, low);
  net.eval();
  double sum = 0;
  for (int64_t b = 0; b < o.eval_batches; ++b) {
    auto [x, y] = batch_tensors(c, split, o.batch, o.model.block, gpt::val_batch_seed(b), dev);
    const auto logits = net(x);
    sum += F::cross_entropy(F::reshape(logits, {-1, c.vocab_size()}), F::reshape(y, {-1})).item<double>();
  }
  net.train();
  return sum / static_cast<double>(o.eval_batches);
}

/// The next token from the last position's logits: divided by the
/// temperature, cut to the top k, sampled.
int64_t pick(const mg::Tensor& logits, const Options& o, std::mt19937_64& rng) {
  std::vector<double> last = logits.to_vector<double>();  // the one host read per token
  for (double& l : last) l /= o.temperature;
  if (o.top_k > 0 && o.top_k < static_cast<int64_t>(last.size())) {
    std::vector<double> sorted = last;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<size_t>(o.top_k - 1)];
    for (double& l : last)
      if (l < kth) l = -INFINITY;
  }
  const double mx = *std::max_element(last.begin(), last.end());
  std::vector<double> w;
  for (double l : last) w.push_back(std::exp(l - mx));
  return std::discrete_distribution<int64_t>(w.begin(), w.end())(rng);
}

mg::Tensor token_tensor(std::vector<int64_t>::const_iterator first, std::vector<int64_t>::const_iterator last,
                        mg::Device dev) {
  std::vector<int64_t> t(first, last);
  const auto n = static_cast<int64_t>(t.size());
  return mg::tensor<int64_t>(t, {1, n}).to(dev);
}

/// Without a cache (nanoGPT's sampler): the whole window, the last `block`
/// tokens, through the model for every new token.
void sample_full_window(gpt::CharGPT& net, std::vector<int64_t>& tokens, const Options& o, std::mt19937_64& rng,
                        mg::Device dev) {
  for (int64_t i = 0; i < o.sample; ++i) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), o.model.block);
    const auto logits = net(token_tensor(tokens.end() - n, tokens.end(), dev));
    tokens.push_back(pick(F::narrow(F::reshape(logits, {n, -1}), 0, n - 1, 1), o, rng));
  }
}

/// With a KV cache per layer: the prompt goes through once, then each new
/// token alone, attending to the cached keys and values. The position
/// embedding knows `block` positions; when the caches are full, they are
/// re-filled from the last block / 2 tokens (one prefill, then block / 2
/// cheap steps again). nanoGPT instead crops to the last `block` tokens at
/// every step, which with a cache would mean a full prefill per token; the
/// text after the first `block` characters therefore differs from the
/// uncached sampler's, which always sees a full window.
void sample_cached(gpt::CharGPT& net, std::vector<int64_t>& tokens, const Options& o, std::mt19937_64& rng,
                   mg::Device dev, mg::DType dtype) {
  auto caches = net.make_kv_caches(1, dtype);
  auto refill = [&](int64_t keep) {
    for (auto& c : caches) c.reset();
    keep = std::min<int64_t>(keep, static_cast<int64_t>(tokens.size()));
    return net.next_logits(token_tensor(tokens.end() - keep, tokens.end(), dev), caches);
  };
  mg::Tensor logits = refill(o.model.block);
  for (int64_t i = 0; i < o.sample; ++i) {
    tokens.push_back(pick(logits, o, rng));
    if (i + 1 == o.sample) break;
    if (caches.front().remaining() == 0)
      logits = refill(std::max<int64_t>(o.model.block / 2, 1));
    else
      logits = net.next_logits(token_tensor(tokens.end() - 1, tokens.end(), dev), caches);
  }
}

/// `o.sample` characters after the prompt, in inference mode and the
/// training precision (autocast: the caches in its low-precision dtype).
/// Prints the speed.
std::string sample(gpt::CharGPT& net, const gpt::Corpus& c, const Options& o, bool autocast, mg::DType low,
                   mg::Device dev) {
  mg::autodiff::inference_mode guard;
  mg::amp::autocast ac(autocast, low);
  net.eval();
  std::mt19937_64 rng(o.seed);
  std::vector<int64_t> tokens = c.encode(o.prompt);
  const auto t0 = Clock::now();
  if (o.kv_cache)
    sample_cached(net, tokens, o, rng, dev, autocast ? low : mg::DType::float32);
  else
    sample_full_window(net, tokens, o, rng, dev);
  const double secs = seconds_since(t0);
  net.train();
  std::printf("sampled %lld characters in %.2f s  %.0f tok/s  (%s, %s)\n", static_cast<long long>(o.sample), secs,
              static_cast<double>(o.sample) / secs, o.kv_cache ? "KV cache" : "whole window per token",
              autocast ? (std::string(mg::to_string(low)) + " autocast").c_str() : "float32");
  return c.decode(tokens);
}

// The model and what trains it: PyTorch's AMP recipe for transformers
// (unscale -> clip -> step), in the run's precision.
struct Trainer {
  Trainer(const Options& o, int64_t vocab, mg::Device dev)
      : prec(o.precision == "auto" ? (dev.is_cuda() ? "fp16" : "bf16") : o.precision),
        autocast(prec != "fp32"),
        low(prec == "fp16" ? mg::DType::float16 : mg::DType::bfloat16),
        net(with_vocab(o.model, vocab)),
        params((net.to(dev), net.parameters())),
        // Weight decay on weight matrices and embeddings only, none on biases
        // and norm weights (GPT-2's and nanoGPT's split).
        opt(mg::optim::weight_decay_groups(params, o.weight_decay), {.lr = o.lr, .betas = {0.9, 0.99}}),
        sched(opt, schedules(opt, o), {std::max<int64_t>(o.warmup, 1)}),
        scaler({.init_scale = 65536.0, .growth_interval = 1000, .enabled = prec == "fp16"}),
        clip(o.clip) {
    gm.attach(params);
  }

  // auto: bf16 on the CPU (no scaling needed, bf16 has float32's range), fp16 + GradScaler on CUDA.
  std::string prec;
  bool autocast;
  mg::DType low;
  gpt::CharGPT net;
  std::vector<mg::Tensor> params;
  mg::autodiff::GradManager gm;
  mg::optim::AdamW opt;
  mg::optim::SequentialLR sched;
  mg::amp::GradScaler scaler;
  double clip;

  /// One optimizer step on (x, y); returns the loss, detached, on the device.
  mg::Tensor step(const mg::Tensor& x, const mg::Tensor& y, int64_t vocab) {
    mg::Tensor loss;
    {
      mg::amp::autocast ac(autocast, low);
      auto rec = gm.record();
      loss = F::cross_entropy(F::reshape(net(x), {-1, vocab}), F::reshape(y, {-1}));
      scaler.backward(gm, loss, mg::Tensor(), {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
    }
    scaler.unscale(gm.attached_tensors());
    if (clip > 0) mg::optim::clip_grad_norm(params, clip);
    opt.step();
    sched.step(scaler);  // on the device, no host read: a skipped step does not advance the schedule
    scaler.update();
    opt.clear_grad();
    return loss.detach();
  }

 private:
  static gpt::Config with_vocab(gpt::Config c, int64_t vocab) {
    c.vocab = vocab;
    return c;
  }
  // Linear warm-up, then a cosine down to --min-lr.
  static std::vector<std::shared_ptr<mg::optim::LRScheduler>> schedules(mg::optim::Optimizer& opt, const Options& o) {
    const int64_t warmup = std::max<int64_t>(o.warmup, 1);
    return {std::make_shared<mg::optim::LinearLR>(opt, 1.0 / static_cast<double>(warmup), 1.0, warmup),
            std::make_shared<mg::optim::CosineAnnealingLR>(opt, o.steps - o.warmup, o.min_lr)};
  }
};

void print_header(const Options& o, const gpt::Corpus& c, const Trainer& t, mg::Device dev) {
  int64_t n_params = 0;
  for (const auto& p : t.params) n_params += p.numel();
  std::printf("train_char_gpt: %lld characters from %lld files of %s, vocabulary %lld\n",
              static_cast<long long>(c.bytes), static_cast<long long>(c.files), o.data_dir.c_str(),
              static_cast<long long>(c.vocab_size()));
  std::printf("model: %lld layers x %lld heads, width %lld, context %lld, %.2fM parameters; %s on %s, batch %lld, %lld steps\n",
              static_cast<long long>(o.model.layers), static_cast<long long>(o.model.heads),
              static_cast<long long>(o.model.embd), static_cast<long long>(o.model.block), n_params / 1e6,
              t.prec == "fp32" ? "float32" : t.prec == "bf16" ? "bf16 autocast" : "fp16 autocast + GradScaler",
              mg::to_string(dev).c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.steps));
  if (dev.is_cpu()) std::printf("CPU: %s\n", mg::cpu::describe(mg::cpu::capabilities()).c_str());
}

void print_summary(const Options& o, mg::Device dev) {
  if (dev.is_cpu())
    std::printf("peak memory of tensors: %.1f MiB%s\n", static_cast<double>(mg::peak_allocated_bytes()) / (1 << 20),
                o.model.checkpoint.empty() ? "" : (" (activation checkpointing: " + o.model.checkpoint + ")").c_str());
  if (o.dtr_mib > 0)
    std::printf("DTR at %lld MiB: %lld evictions, %lld recomputations taking %.1f s\n",
                static_cast<long long>(o.dtr_mib), static_cast<long long>(mg::dtr::stats().evictions),
                static_cast<long long>(mg::dtr::stats().recomputations), mg::dtr::stats().recompute_seconds);
  if (dev.is_cuda())
    std::printf("attention: %s (%lld fused calls)\n",
                mg::cuda::fused_attention_available(dev.index())
                    ? "cuDNN's fused kernel where a call allows it"
                    : "the composed ops (no cuDNN frontend in this build, or a GPU before Ampere)",
                static_cast<long long>(mg::cuda::fused_attention_calls()));
}

// Trains from `step` to --steps (or --stop-after), logging every 50 steps and
// at each validation, saving a checkpoint there with --save. Returns the
// last validation loss.
double train(Trainer& t, const Options& o, const gpt::Corpus& c, mg::Device dev, int64_t& step,
             const std::function<mg::io::Checkpoint()>& checkpoint) {
  std::ofstream metrics;
  if (!o.metrics.empty()) {
    metrics.open(o.metrics);
    metrics << "step,loss,val_loss,lr,scale,tokens_per_s\n";
  }
  const int64_t last = o.stop_after > 0 ? std::min(o.stop_after, o.steps) : o.steps;
  const double tokens_per_step = static_cast<double>(o.batch * o.model.block);
  mg::Tensor loss_sum;  // the interval's losses, summed where they are: read once per log line
  double val = NAN;
  int64_t since = 0;
  auto t0 = Clock::now();
  const auto run_start = Clock::now();
  while (step < last) {
    auto [x, y] = batch_tensors(c, c.train, o.batch, o.model.block, gpt::train_batch_seed(o.seed, step), dev);
    const mg::Tensor loss = t.step(x, y, c.vocab_size());
    ++step;
    loss_sum = loss_sum.defined() ? F::add(loss_sum, loss) : loss;
    ++since;
    const bool eval_now = step % o.eval_interval == 0 || step == last;
    if (step % 50 != 0 && !eval_now) continue;
    // Read from the device only here, every 50 steps and at validations: the
    // loss sum, the scale and the skipped steps (the steps the optimizer did
    // not count), not a host read per step.
    const double mean_loss = loss_sum.item<double>() / static_cast<double>(since);
    const double tps = tokens_per_step * static_cast<double>(since) / seconds_since(t0);
    if (eval_now) val = evaluate(t.net, c, c.val, o, t.autocast, t.low, dev);
    std::printf("step %5lld/%lld  loss %.4f  %s  lr %.2e  scale %g  skipped %lld  %.0f tok/s  %s\n",
                static_cast<long long>(step), static_cast<long long>(o.steps), mean_loss,
                eval_now ? ("val " + std::to_string(val).substr(0, 6)).c_str() : "          ", t.opt.lr(),
                t.scaler.scale_factor(), static_cast<long long>(step - t.opt.step_count(0)), tps,
                ("elapsed " + std::to_string(static_cast<int>(seconds_since(run_start))) + " s").c_str());
    std::fflush(stdout);
    if (metrics.is_open())
      metrics << step << ',' << mean_loss << ',' << (eval_now ? val : NAN) << ',' << t.opt.lr() << ','
              << t.scaler.scale_factor() << ',' << tps << '\n';
    if (eval_now && !o.save.empty()) mg::io::save_checkpoint(o.save, checkpoint());
    loss_sum = mg::Tensor();
    since = 0;
    t0 = Clock::now();
  }
  std::printf("done: step %lld, validation loss %.4f nats/char, %.0f s\n", static_cast<long long>(step), val,
              seconds_since(run_start));
  return val;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int code = parse(argc, argv, o); code >= 0) return code;
  try {
    const mg::Device dev = mg::parse_device(o.device);
    mg::set_num_threads(static_cast<int>(o.threads));
    mg::manual_seed(o.seed);
    auto corpus = gpt::load_corpus(o.data_dir);
    if (!corpus) return 2;
    Trainer t(o, corpus->vocab_size(), dev);
    print_header(o, *corpus, t, dev);
    if (o.dtr_mib > 0) mg::dtr::enable({.eviction_threshold = o.dtr_mib << 20, .evictee_minimum_size = 0});

    int64_t step = 0;
    auto checkpoint = [&] {
      return mg::io::Checkpoint{.model = &t.net, .optimizer = &t.opt, .scheduler = &t.sched, .scaler = &t.scaler,
                                .step = step};
    };
    if (!o.resume.empty()) {
      const auto info = mg::io::load_checkpoint(o.resume, checkpoint());
      step = info.step;
      std::printf("resumed from %s at step %lld\n", info.path.c_str(), static_cast<long long>(step));
    }
    if (!o.save.empty()) std::filesystem::create_directories(o.save);
    train(t, o, *corpus, dev, step, checkpoint);
    print_summary(o, dev);
    if (o.sample > 0) {
      const std::string text = sample(t.net, *corpus, o, t.autocast, t.low, dev);
      std::printf("\n--- sample (temperature %.2f, top-%lld) ---\n%s\n---\n", o.temperature,
                  static_cast<long long>(o.top_k), text.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_char_gpt: training failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
