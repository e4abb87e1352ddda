// The global switch: amp::enabled turns autocast on for every thread that
// has no autocast scope open. Prints the dtype each layer produces.
//
//   build/examples/amp_global_switch
#include <cstdio>

#include <mixgrad/mixgrad.hpp>

namespace mg = mixgrad;

namespace {
void show(const char* what, const mg::Tensor& t) {
  std::printf("  %-28s %-10s %s\n", what, std::string(mg::to_string(t.dtype())).c_str(),
              mg::to_string(t.shape()).c_str());
}

void forward(mg::nn::Sequential& features, mg::nn::Linear& head, const mg::Tensor& x) {
  const auto f = features(x);
  show("conv -> batch_norm -> relu", f);
  const auto pooled = mg::F::flatten(mg::F::adaptive_avg_pool2d(f, 1), 1);
  show("adaptive_avg_pool + flatten", pooled);
  const auto logits = head(pooled);
  show("linear", logits);
  show("softmax", mg::F::softmax(logits, 1));
}
}  // namespace

int main() {
  mg::manual_seed(0);
  auto features = mg::nn::Sequential(mg::nn::Conv2d(3, 8, 3, {.padding = 1}), mg::nn::BatchNorm2d(8), mg::nn::ReLU());
  mg::nn::Linear head(8, 10);
  const auto x = mg::normal({2, 3, 16, 16});

  std::printf("amp::enabled = false\n");
  forward(features, head, x);

  mg::amp::enabled = true;  // bfloat16 by default on the CPU
  std::printf("amp::enabled = true (low_prec_dtype = %s)\n",
              std::string(mg::to_string(mg::amp::low_prec_dtype)).c_str());
  forward(features, head, x);

  mg::amp::low_prec_dtype = mg::DType::float16;
  std::printf("amp::low_prec_dtype = float16\n");
  forward(features, head, x);
  mg::amp::enabled = false;
  return 0;
}
