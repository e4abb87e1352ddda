// The LibTorch side of bench_gpt: the character-level GPT of
// examples/train_char_gpt written with torch::nn modules and
// at::scaled_dot_product_attention, trained with torch::optim::AdamW.
#include <torch/torch.h>

#include "bench_gpt_sides.hpp"
#include "libtorch_autocast.hpp"

namespace perf::gpt {

namespace {

namespace tnn = torch::nn;

struct BlockImpl : tnn::Module {
  BlockImpl(int64_t c, int64_t h)
      : heads(h),
        ln1(register_module("ln1", tnn::LayerNorm(tnn::LayerNormOptions({c})))),
        ln2(register_module("ln2", tnn::LayerNorm(tnn::LayerNormOptions({c})))),
        qkv(register_module("qkv", tnn::Linear(c, 3 * c))),
        proj(register_module("proj", tnn::Linear(c, c))),
        fc1(register_module("fc1", tnn::Linear(c, 4 * c))),
        fc2(register_module("fc2", tnn::Linear(4 * c, c))) {}
  torch::Tensor forward(torch::Tensor x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads;
    auto parts = qkv(ln1(x)).split(C, 2);
    auto split_heads = [&](const torch::Tensor& t) { return t.view({B, T, heads, D}).transpose(1, 2); };
    auto y = at::scaled_dot_product_attention(split_heads(parts[0]), split_heads(parts[1]), split_heads(parts[2]), {},
                                              0.0, true);
    x = x + proj(y.transpose(1, 2).reshape({B, T, C}));
    return x + fc2(torch::gelu(fc1(ln2(x)), "tanh"));
  }
  int64_t heads;
  tnn::LayerNorm ln1, ln2;
  tnn::Linear qkv, proj, fc1, fc2;
};
TORCH_MODULE(Block);

struct GptImpl : tnn::Module {
  explicit GptImpl(const Config& c)
      : tok(register_module("tok", tnn::Embedding(c.vocab, c.embd))),
        pos(register_module("pos", tnn::Embedding(c.block, c.embd))),
        ln_f(register_module("ln_f", tnn::LayerNorm(tnn::LayerNormOptions({c.embd})))) {
    // The names appended: GCC 12 warns (-Wrestrict, a false positive) at "b" + std::to_string(i).
    for (int64_t i = 0; i < c.layers; ++i)
      blocks.push_back(register_module(std::string("b").append(std::to_string(i)), Block(c.embd, c.heads)));
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    auto x = tok(idx) + pos(torch::arange(idx.size(1)));
    for (auto& b : blocks) x = b->forward(x);
    return torch::linear(ln_f(x), tok->weight);
  }
  tnn::Embedding tok, pos;
  std::vector<Block> blocks;
  tnn::LayerNorm ln_f;
};
TORCH_MODULE(Gpt);

class TorchGpt final : public Runner {
 public:
  TorchGpt(const Config& c, const int64_t* tokens)
      : c_(c), net_(c), opt_(net_->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1)) {
    auto all = torch::from_blob(const_cast<int64_t*>(tokens), {c.batch, c.block + 1}, torch::kInt64).clone();
    x_ = all.narrow(1, 0, c.block).contiguous();
    y_ = all.narrow(1, 1, c.block).contiguous();
  }
  void run() override {
    torch::Tensor loss;
    if (c_.bf16) {
      Autocast scope(false);
      loss = torch::cross_entropy_loss(net_->forward(x_).reshape({-1, c_.vocab}).to(torch::kFloat32), y_.reshape({-1}));
    } else {
      loss = torch::cross_entropy_loss(net_->forward(x_).reshape({-1, c_.vocab}), y_.reshape({-1}));
    }
    loss.backward();
    torch::nn::utils::clip_grad_norm_(net_->parameters(), 1.0);
    opt_.step();
    opt_.zero_grad();
    value_ = loss.item<double>();
  }
  double value() const override { return value_; }

 private:
  Config c_;
  Gpt net_;
  torch::optim::AdamW opt_;
  torch::Tensor x_, y_;
  double value_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_libtorch(const Config& c, const int64_t* tokens) {
  return std::make_unique<TorchGpt>(c, tokens);
}

}  // namespace perf::gpt
