#include "mixgrad/nn/embedding.hpp"

#include "hooks/op_hooks.hpp"
#include "core/sizes.hpp"
#include "mixgrad/nn/init.hpp"
#include "mixgrad/ops/indexing.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) : num_(num_embeddings), dim_(embedding_dim) {
  if (num_embeddings < 1 || embedding_dim < 1)
    throw ValueError("Embedding: num_embeddings and embedding_dim must be >= 1, got " +
                     std::to_string(num_embeddings) + " and " + std::to_string(embedding_dim));
  sizes::nbytes(Shape{num_, dim_}, DType::float32, "Embedding");
  weight_ = register_parameter("weight", empty({num_, dim_}));
  autodiff::NoRecordScope no_record;
  init::normal_(weight_, 0.0, 1.0);
}

Tensor Embedding::forward(const Tensor& ids) {
  core::check_defined("Embedding", {&ids});
  return F::embedding(weight_, ids);
}

std::string Embedding::describe() const {
  return "Embedding(" + std::to_string(num_) + ", " + std::to_string(dim_) + ")";
}

}  // namespace mixgrad::nn
