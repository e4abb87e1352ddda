// mixgrad/nn/embedding.hpp — a lookup table of learned vectors, one per id.
//
//   mg::nn::Embedding emb(10000, 256);          // weight [10000, 256]
//   auto tokens = mg::tensor<int64_t>({3, 14, 15, 92}, {2, 2});
//   auto e = emb(tokens);                       // [2, 2, 256]
//
// PyTorch's nn.Embedding / MegEngine's M.Embedding without padding_idx or
// max_norm: the weight (state_dict name "weight") starts as N(0, 1), as in
// PyTorch, and its gradient is dense (every row, zero where no id was seen).
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

class Embedding : public Module {
 public:
  /// Throws ValueError unless num_embeddings and embedding_dim are >= 1.
  Embedding(int64_t num_embeddings, int64_t embedding_dim);

  /// F::embedding(weight, ids): ids int64 of any shape -> ids.shape + [dim];
  /// ValueError for an id outside [0, num_embeddings), DTypeError for a
  /// non-int64 ids tensor.
  Tensor forward(const Tensor& ids) override;
  std::string describe() const override;

  const Tensor& weight() const { return weight_; }
  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }

 private:
  int64_t num_, dim_;
  Tensor weight_;
};

}  // namespace mixgrad::nn
