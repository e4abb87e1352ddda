// model.hpp — a GPT for characters: token and position embeddings, a stack
// of pre-norm transformer layers with causal self-attention and tanh-GELU
// MLPs, a final LayerNorm, and an output layer tied to the token embedding
// (GPT-2's shape, nanoGPT's initialisation: N(0, 0.02)-like weights).
//
//   gpt::CharGPT net({.vocab = 96, .block = 64, .layers = 4, .heads = 4, .embd = 128});
//   mg::Tensor logits = net(tokens);   // int64 [B, T] -> [B, T, vocab]
//
//   // Decoding (under no_grad): one KV cache per layer, the prompt once, then a token at a time.
//   auto caches = net.make_kv_caches(/*batch=*/1, mg::DType::bfloat16);   // the dtype attention runs in
//   mg::Tensor next = net.next_logits(prompt, caches);                      // [1, vocab]
//   next = net.next_logits(token, caches);                                  // token: [1, 1]
#pragma once

#include <memory>
#include <mixgrad/mixgrad.hpp>
#include <string>
#include <vector>

namespace gpt {

namespace mg = mixgrad;

struct Config {
  int64_t vocab = 0, block = 64, layers = 4, heads = 4, embd = 128;
  double dropout = 0.0;
  // Activation checkpointing per layer (autodiff::checkpoint): "" off, "full"
  // recompute everything, "attention" keep attention's results, "products"
  // keep the linears' and attention's, "alternate" every other linear's and attention's.
  std::string checkpoint = {};
  // Each layer a dtr::segment (main enables DTR with its threshold).
  bool dtr = false;
};

/// The CheckpointOptions of Config::checkpoint's mode; ValueError for an unknown one.
inline mg::autodiff::CheckpointOptions checkpoint_options(const std::string& mode) {
  mg::autodiff::CheckpointOptions o{.name = "layer"};
  if (mode == "attention") o.keep = {"scaled_dot_product_attention"};
  if (mode == "products" || mode == "alternate") o.keep = mg::autodiff::kept_products();
  if (mode == "alternate") o.keep_if = [](std::string_view op, int64_t n) { return op != "linear" || n % 2 == 0; };
  if (mode != "full" && mode != "attention" && mode != "products" && mode != "alternate")
    throw mg::ValueError("--checkpoint: unknown mode '" + mode + "' (full, attention, products or alternate)");
  return o;
}


class CharGPT : public mg::nn::Module {
 public:
  explicit CharGPT(const Config& c) : c_(c) {
    if (!c.checkpoint.empty()) checkpoint_ = checkpoint_options(c.checkpoint);
    tok_ = register_module("tok_emb", mg::nn::Embedding(c.vocab, c.embd));
    pos_ = register_module("pos_emb", mg::nn::Embedding(c.block, c.embd));
    // The layers, named blocks.0, blocks.1, ... (a Sequential holds them;
    // forward calls each with the causal flag).
    auto stack = register_module("blocks", mg::nn::Sequential());
    for (int64_t i = 0; i < c.layers; ++i) {
      auto layer = std::make_shared<mg::nn::TransformerEncoderLayer>(
          c.embd, c.heads,
          mg::nn::TransformerEncoderLayerOptions{.dim_feedforward = 4 * c.embd, .dropout = c.dropout,
                                                 .activation = mg::nn::Activation::gelu_tanh, .batch_first = true,
                                                 .norm_first = true});
      stack->push_back(layer);
      blocks_.push_back(layer);
    }
    ln_f_ = register_module("ln_f", mg::nn::LayerNorm(c.embd));
    // Small weights, as GPT-2: uniform with standard deviation 0.02.
    for (const auto& [name, p] : named_parameters())
      if (p.ndim() == 2) mg::nn::init::uniform_(p, -0.0346, 0.0346);
  }

  /// tokens: int64 [B, T] with T <= block. Logits [B, T, vocab].
  mg::Tensor forward(const mg::Tensor& tokens) override {
    const int64_t T = tokens.size(1);
    mg::Tensor x = mg::F::add((*tok_)(tokens), (*pos_)(mg::arange(T).to(tokens.device())));
    for (auto& b : blocks_) {
      auto layer = [b](const mg::Tensor& t) { return b->forward(t, {.is_causal = true}); };
      if (c_.dtr && is_training())
        x = mg::dtr::segment(layer, x, "layer");
      else
        x = !c_.checkpoint.empty() && is_training() ? mg::autodiff::checkpoint(layer, x, checkpoint_) : layer(x);
    }
    return mg::F::linear((*ln_f_)(x), tok_->weight());  // tied: the output layer is the token embedding
  }

  /// One cache per layer, `block` positions each, on the model's device, in
  /// `dtype`: the one attention runs in (autocast's low-precision dtype under
  /// autocast, else float32).
  std::vector<mg::nn::KVCache> make_kv_caches(int64_t batch, mg::DType dtype) const {
    std::vector<mg::nn::KVCache> caches;
    caches.reserve(blocks_.size());
    for (const auto& b : blocks_) caches.push_back(b->make_kv_cache(batch, c_.block, dtype));
    return caches;
  }

  /// tokens: int64 [B, T], the positions that follow the caches' length
  /// (length + T <= block). Appends their keys and values and returns the
  /// logits of the last position only, [B, vocab]: all that sampling reads.
  mg::Tensor next_logits(const mg::Tensor& tokens, std::vector<mg::nn::KVCache>& caches) {
    const int64_t T = tokens.size(1), past = caches.front().length();
    // Positions past..past+T-1: rows of the position table (no index tensor to send to the device).
    mg::Tensor x = mg::F::add((*tok_)(tokens), mg::F::narrow(pos_->weight(), 0, past, T));
    for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward(x, caches[i]);
    x = mg::F::reshape(mg::F::narrow(x, 1, T - 1, 1), {x.size(0), c_.embd});
    return mg::F::linear((*ln_f_)(x), tok_->weight());
  }

  const Config& config() const { return c_; }

 private:
  Config c_;
  mg::autodiff::CheckpointOptions checkpoint_;
  std::shared_ptr<mg::nn::Embedding> tok_, pos_;
  std::vector<std::shared_ptr<mg::nn::TransformerEncoderLayer>> blocks_;
  std::shared_ptr<mg::nn::LayerNorm> ln_f_;
};

}  // namespace gpt
