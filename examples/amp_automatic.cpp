// The automatic gear: autocast as a decorator-like wrapper around the whole
// training step, and scaler.backward(gm, loss) doing scale -> backward ->
// unscale -> update. The C++ form of the first listing of MegEngine's AMP
// guide, on a small synthetic classification task.
//
//   build/examples/amp_automatic [steps]
#include <cstdio>
#include <cstdlib>

#include <mixgrad/mixgrad.hpp>

namespace mg = mixgrad;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  mg::manual_seed(0);

  // Data: 512 points in 20-d, labelled by a random linear "teacher".
  const auto x = mg::normal({512, 20});
  const auto labels = mg::F::argmax(mg::F::matmul(x, mg::normal({20, 4})), 1);

  auto net = mg::nn::Sequential(mg::nn::Linear(20, 64), mg::nn::ReLU(), mg::nn::Linear(64, 4));
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  mg::amp::GradScaler scaler;  // 2^4, x2 growth, x0.5 backoff, every 2000 steps

  // float16 shows the scaler at work; bfloat16 (the CPU default) rarely needs it.
  auto train_step = mg::amp::autocast(true, mg::DType::float16).wrap([&](const mg::Tensor& xb, const mg::Tensor& yb) {
    mg::Tensor loss;
    {
      auto recording = gm.record();          // `with gm:`
      auto logits = net(xb);                 // linear layers run in float16
      loss = mg::F::cross_entropy(logits, yb);  // float32, by the autocast policy
      scaler.backward(gm, loss);             // scale dy, backward, unscale, update
    }
    opt.step().clear_grad();                 // skipped params (overflow) keep their values
    return loss;
  });

  for (int step = 1; step <= steps; ++step) {
    const auto loss = train_step(x, labels);
    // item() and scale_factor() wait for the device: read only when printed.
    if (step % 50 == 0 || step == 1)
      std::printf("step %4d  loss %.4f  (%s)  scale %g\n", step, loss.item<float>(),
                  std::string(mg::to_string(loss.dtype())).c_str(), scaler.scale_factor());
  }
  const auto predicted = mg::F::argmax(net(x), 1);
  const double accuracy = mg::F::mean(mg::F::astype(mg::F::eq(predicted, labels), mg::DType::float32)).item<double>();
  std::printf("train accuracy %.1f%%\n", 100 * accuracy);
  return accuracy > 0.9 ? 0 : 1;
}
