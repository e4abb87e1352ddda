// train_char_gpt_libtorch — the LibTorch twin of examples/train_char_gpt,
// so the example's validation loss can be set against the same training in
// LibTorch (tests/perf/gpt_parity.sh runs both). Built only where a
// LibTorch is found; it does not link mixgrad.
//
// The same as the example, option for option and default for default:
//   - data: text.hpp's corpus, vocabulary, 90/10 split and batches (each
//     drawn from its own seed, so both programs see the very same ones);
//   - model: token + position embeddings, pre-norm layers laid out as
//     nn.TransformerEncoderLayer (one in_proj for q, k, v; causal SDPA;
//     tanh-GELU MLP of width 4C; LayerNorm eps 1e-5; dropout at its four
//     places), a final LayerNorm, the output tied to the token embedding;
//   - init: every 2-D parameter U(-0.0346, 0.0346) (std 0.02), in_proj and
//     out_proj biases 0, MLP biases U(+-1/sqrt(fan_in)), LayerNorms 1 and 0
//     (the same distributions; the draws are LibTorch's generator's);
//   - AdamW (betas 0.9 / 0.99, eps 1e-8) in two groups, as the example's
//     optim::weight_decay_groups: weight decay 0.1 on the parameters of two
//     or more dimensions, none on biases and norm weights; linear warm-up then cosine
//     (the closed form of the example's SequentialLR), clip_grad_norm 1.0;
//   - bf16 autocast on the CPU (LibTorch's own autocast policy), the loss in
//     float32; the validation loss as the mean over the same fixed batches.
//
//   train_char_gpt_libtorch                     # the example's default run
//   train_char_gpt_libtorch --seed 7 --steps 500
// Prints the example's log lines and ends with
//   done: step 2500, validation loss 1.6360 nats/char, 400 s
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <numbers>
#include <string>

#include "libtorch_autocast.hpp"
#include "train_char_gpt/text.hpp"

namespace {

namespace tnn = torch::nn;
using Clock = std::chrono::steady_clock;

// main.cpp's Options, the fields that shape the training (their defaults).
struct Options {
  int64_t steps = 2500, batch = 32, block = 128, layers = 4, heads = 4, embd = 128;
  int64_t warmup = 100, eval_interval = 250, eval_batches = 20, threads = 2;
  double dropout = 0.0, lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, clip = 1.0;
  std::string precision = "auto", data_dir = "/usr/share/games/fortunes";
  int64_t seed = 1337;
};

/// "--name value" pairs into `o`; false (and a message) on anything else.
bool parse(int argc, char** argv, Options& o) {
  std::map<std::string, std::function<void(const std::string&)>> set;
  for (auto [name, field] : {std::pair{"steps", &o.steps}, {"batch-size", &o.batch}, {"block", &o.block},
                             {"layers", &o.layers}, {"heads", &o.heads}, {"embd", &o.embd}, {"warmup", &o.warmup},
                             {"eval-interval", &o.eval_interval}, {"eval-batches", &o.eval_batches},
                             {"threads", &o.threads}, {"seed", &o.seed}})
    set[name] = [field](const std::string& v) { *field = std::stoll(v); };
  for (auto [name, field] : {std::pair{"dropout", &o.dropout}, {"lr", &o.lr}, {"min-lr", &o.min_lr},
                             {"weight-decay", &o.weight_decay}, {"clip", &o.clip}})
    set[name] = [field](const std::string& v) { *field = std::stod(v); };
  set["precision"] = [&](const std::string& v) { o.precision = v; };
  set["data-dir"] = [&](const std::string& v) { o.data_dir = v; };
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    auto it = arg.rfind("--", 0) == 0 ? set.find(arg.substr(2)) : set.end();
    if (it == set.end() || i + 1 >= argc) {
      std::fprintf(stderr, "train_char_gpt_libtorch: bad option %s (options as train_char_gpt's, each with a value)\n",
                   arg.c_str());
      return false;
    }
    it->second(argv[i + 1]);
  }
  const bool ok = o.steps >= 1 && o.warmup >= 0 && o.warmup < o.steps && o.embd % o.heads == 0 &&
                  (o.precision == "auto" || o.precision == "bf16" || o.precision == "fp32");
  if (!ok) std::fprintf(stderr, "train_char_gpt_libtorch: bad --steps, --warmup, --embd / --heads or --precision\n");
  return ok;
}

/// One pre-norm layer, nn.TransformerEncoderLayer(norm_first, batch_first,
/// gelu tanh): x + drop1(attn(norm1(x))), then x + drop2(linear2(drop(gelu(linear1(norm2(x)))))).
struct LayerImpl : tnn::Module {
  LayerImpl(int64_t c, int64_t h, double p)
      : heads(h),
        dropout(p),
        in_proj_weight(register_parameter("in_proj_weight", torch::empty({3 * c, c}))),
        in_proj_bias(register_parameter("in_proj_bias", torch::zeros({3 * c}))),
        out_proj(register_module("out_proj", tnn::Linear(c, c))),
        linear1(register_module("linear1", tnn::Linear(c, 4 * c))),
        linear2(register_module("linear2", tnn::Linear(4 * c, c))),
        norm1(register_module("norm1", tnn::LayerNorm(tnn::LayerNormOptions({c}).eps(1e-5)))),
        norm2(register_module("norm2", tnn::LayerNorm(tnn::LayerNormOptions({c}).eps(1e-5)))) {
    torch::NoGradGuard no_grad;
    out_proj->bias.zero_();  // nn.MultiheadAttention's out_proj bias starts at 0
  }
  torch::Tensor drop(const torch::Tensor& t) { return torch::dropout(t, dropout, is_training()); }
  torch::Tensor attention(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads;
    auto qkv = torch::linear(x, in_proj_weight, in_proj_bias).split(C, 2);
    auto split_heads = [&](const torch::Tensor& t) { return t.view({B, T, heads, D}).transpose(1, 2); };
    auto y = at::scaled_dot_product_attention(split_heads(qkv[0]), split_heads(qkv[1]), split_heads(qkv[2]), {},
                                              is_training() ? dropout : 0.0, /*is_causal=*/true);
    return out_proj(y.transpose(1, 2).reshape({B, T, C}));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + drop(attention(norm1(x)));
    return x + drop(linear2(drop(torch::gelu(linear1(norm2(x)), "tanh"))));
  }
  int64_t heads;
  double dropout;
  torch::Tensor in_proj_weight, in_proj_bias;
  tnn::Linear out_proj, linear1, linear2;
  tnn::LayerNorm norm1, norm2;
};
TORCH_MODULE(Layer);

/// model.hpp's CharGPT.
struct GptImpl : tnn::Module {
  GptImpl(const Options& o, int64_t vocab)
      : tok_emb(register_module("tok_emb", tnn::Embedding(vocab, o.embd))),
        pos_emb(register_module("pos_emb", tnn::Embedding(o.block, o.embd))),
        ln_f(register_module("ln_f", tnn::LayerNorm(tnn::LayerNormOptions({o.embd}).eps(1e-5)))) {
    for (int64_t i = 0; i < o.layers; ++i)
      blocks.push_back(register_module("blocks_" + std::to_string(i), Layer(o.embd, o.heads, o.dropout)));
    torch::NoGradGuard no_grad;
    for (auto& p : parameters())
      if (p.dim() == 2) p.uniform_(-0.0346, 0.0346);  // model.hpp: uniform with standard deviation 0.02
  }
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = tok_emb(tokens) + pos_emb(torch::arange(tokens.size(1)));
    for (auto& b : blocks) x = b->forward(x);
    return torch::linear(ln_f(x), tok_emb->weight);  // tied
  }
  tnn::Embedding tok_emb, pos_emb;
  std::vector<Layer> blocks;
  tnn::LayerNorm ln_f;
};
TORCH_MODULE(Gpt);

/// The lr of step `step` (from 0): LinearLR from lr / warmup up to lr over
/// `warmup` steps, then CosineAnnealingLR down to min_lr at `steps`, as the
/// example's SequentialLR computes it.
double lr_at(const Options& o, int64_t step) {
  const int64_t w = std::max<int64_t>(o.warmup, 1);
  if (step < w) {
    const double start = 1.0 / static_cast<double>(w);
    return o.lr * (start + (1.0 - start) * static_cast<double>(step) / static_cast<double>(w));
  }
  const double t = static_cast<double>(step - w) / static_cast<double>(o.steps - o.warmup);
  return o.min_lr + (o.lr - o.min_lr) * (1.0 + std::cos(std::numbers::pi * t)) / 2.0;
}

/// The windows of `seed` as int64 tensors [rows, block].
std::pair<torch::Tensor, torch::Tensor> batch_tensors(const gpt::Corpus& c, const std::vector<int64_t>& split,
                                                      int64_t rows, int64_t block, uint64_t seed) {
  gpt::Windows w = c.windows(split, rows, block, seed);
  auto as_tensor = [&](std::vector<int64_t>& v) {
    return torch::from_blob(v.data(), {rows, block}, torch::kInt64).clone();
  };
  return {as_tensor(w.x), as_tensor(w.y)};
}

/// Mean cross-entropy of the batch, float32, under bf16 autocast when `bf16`.
torch::Tensor loss_of(Gpt& net, const torch::Tensor& x, const torch::Tensor& y, int64_t vocab, bool bf16) {
  std::optional<perf::Autocast> scope;
  if (bf16) scope.emplace(/*cuda=*/false);
  auto logits = net->forward(x).reshape({-1, vocab}).to(torch::kFloat32);
  return torch::cross_entropy_loss(logits, y.reshape({-1}));
}

/// The example's evaluate(): eval mode, no gradients, the fixed validation batches.
double evaluate(Gpt& net, const gpt::Corpus& c, const Options& o, bool bf16) {
  torch::NoGradGuard no_grad;
  net->eval();
  double sum = 0;
  for (int64_t b = 0; b < o.eval_batches; ++b) {
    auto [x, y] = batch_tensors(c, c.val, o.batch, o.block, gpt::val_batch_seed(b));
    sum += loss_of(net, x, y, c.vocab_size(), bf16).item<double>();
  }
  net->train();
  return sum / static_cast<double>(o.eval_batches);
}

void set_lr(torch::optim::AdamW& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

torch::optim::AdamWOptions adamw_options(const Options& o, double weight_decay) {
  return torch::optim::AdamWOptions(lr_at(o, 0)).betas({0.9, 0.99}).eps(1e-8).weight_decay(weight_decay);
}

// The example's optim::weight_decay_groups: decay on tensors of two or more
// dimensions (weight matrices, embeddings), none on the others, in this order.
std::vector<torch::optim::OptimizerParamGroup> param_groups(const std::vector<torch::Tensor>& params,
                                                            const Options& o) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(adamw_options(o, o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(adamw_options(o, 0.0)));
  return groups;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  torch::set_num_threads(static_cast<int>(o.threads));
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  auto corpus = gpt::load_corpus(o.data_dir);
  if (!corpus) return 2;
  const bool bf16 = o.precision != "fp32";
  const int64_t vocab = corpus->vocab_size();
  Gpt net(o, vocab);
  int64_t n_params = 0;
  for (const auto& p : net->parameters()) n_params += p.numel();
  torch::optim::AdamW opt(param_groups(net->parameters(), o), adamw_options(o, o.weight_decay));

  // The example's first lines, so gpt_parity.sh can check that both train the same thing.
  std::printf("train_char_gpt: %lld characters from %lld files of %s, vocabulary %lld\n",
              static_cast<long long>(corpus->bytes), static_cast<long long>(corpus->files), o.data_dir.c_str(),
              static_cast<long long>(vocab));
  std::printf("model: %lld layers x %lld heads, width %lld, context %lld, %.2fM parameters; %s on LibTorch %s, batch %lld, %lld steps\n",
              static_cast<long long>(o.layers), static_cast<long long>(o.heads), static_cast<long long>(o.embd),
              static_cast<long long>(o.block), static_cast<double>(n_params) / 1e6, bf16 ? "bf16 autocast" : "float32",
              TORCH_VERSION, static_cast<long long>(o.batch), static_cast<long long>(o.steps));

  double loss_sum = 0, val = NAN;
  int64_t since = 0;
  const auto run_start = Clock::now();
  auto t0 = Clock::now();
  for (int64_t step = 0; step < o.steps;) {
    set_lr(opt, lr_at(o, step));
    auto [x, y] = batch_tensors(*corpus, corpus->train, o.batch, o.block, gpt::train_batch_seed(o.seed, step));
    torch::Tensor loss = loss_of(net, x, y, vocab, bf16);
    loss.backward();
    if (o.clip > 0) torch::nn::utils::clip_grad_norm_(net->parameters(), o.clip);
    opt.step();
    opt.zero_grad();
    ++step;
    loss_sum += loss.item<double>();
    ++since;
    const bool eval_now = step % o.eval_interval == 0 || step == o.steps;
    if (step % 50 != 0 && !eval_now) continue;
    const double tps = static_cast<double>(o.batch * o.block * since) / seconds_since(t0);
    if (eval_now) val = evaluate(net, *corpus, o, bf16);
    // The lr printed is the next step's, as the example prints it after sched.step().
    std::printf("step %5lld/%lld  loss %.4f  %s  lr %.2e  %.0f tok/s  elapsed %d s\n", static_cast<long long>(step),
                static_cast<long long>(o.steps), loss_sum / static_cast<double>(since),
                eval_now ? ("val " + std::to_string(val).substr(0, 6)).c_str() : "          ",
                lr_at(o, step), tps, static_cast<int>(seconds_since(run_start)));
    std::fflush(stdout);
    loss_sum = 0;
    since = 0;
    t0 = Clock::now();
  }
  std::printf("done: step %lld, validation loss %.4f nats/char, %.0f s\n", static_cast<long long>(o.steps), val,
              seconds_since(run_start));
  return 0;
}
