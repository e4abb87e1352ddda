// model.hpp — a GPT for characters: token and position embeddings, a stack
// of pre-norm transformer layers with causal self-attention and tanh-GELU
// MLPs, a final LayerNorm, and an output layer tied to the token embedding
// (GPT-2's shape, nanoGPT's initialisation: N(0, 0.02)-like weights).
//
//   gpt::CharGPT net({.vocab = 96, .block = 64, .layers = 4, .heads = 4, .embd = 128});
//   mg::Tensor logits = net(tokens);   // int64 [B, T] -> [B, T, vocab]
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
};

class CharGPT : public mg::nn::Module {
 public:
  explicit CharGPT(const Config& c) : c_(c) {
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
    for (auto& b : blocks_) x = b->forward(x, {.is_causal = true});
    return mg::F::linear((*ln_f_)(x), tok_->weight());  // tied: the output layer is the token embedding
  }

  const Config& config() const { return c_; }

 private:
  Config c_;
  std::shared_ptr<mg::nn::Embedding> tok_, pos_;
  std::vector<std::shared_ptr<mg::nn::TransformerEncoderLayer>> blocks_;
  std::shared_ptr<mg::nn::LayerNorm> ln_f_;
};

}  // namespace gpt
