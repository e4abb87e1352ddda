// The manual gear, for gradient accumulation: k micro-batches each
// backpropagate a scaled loss (gradients accumulate in .grad()), then one
// fused unscale of all gradients, one scale update, one optimizer step.
//
//   build/examples/amp_grad_accumulation [steps] [k]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <mixgrad/mixgrad.hpp>

namespace mg = mixgrad;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 100;
  const int k = argc > 2 ? std::atoi(argv[2]) : 4;
  mg::manual_seed(1);

  const auto x = mg::normal({512, 20});
  const auto labels = mg::F::argmax(mg::F::matmul(x, mg::normal({20, 4})), 1);
  const int64_t micro = 512 / k;

  auto net = mg::nn::Sequential(mg::nn::Linear(20, 64), mg::nn::ReLU(), mg::nn::Linear(64, 4));
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  mg::amp::GradScaler scaler;

  for (int step = 1; step <= steps; ++step) {
    mg::Tensor total;  // the step's loss, summed on the device
    for (int i = 0; i < k; ++i) {
      mg::amp::autocast scope(true, mg::DType::float16);  // RAII scope
      auto recording = gm.record();
      const auto xb = x.narrow(0, i * micro, micro);
      const auto yb = labels.narrow(0, i * micro, micro);
      // Dividing by k makes the accumulated gradient the big batch's mean.
      auto loss = mg::F::div(mg::F::cross_entropy(net(xb), yb), static_cast<double>(k));
      scaler.backward(gm, loss, mg::Tensor(),
          {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});  // scaled grads accumulate
      total = total.defined() ? mg::F::add(total, loss.detach()) : loss.detach();
    }
    scaler.unscale(gm.attached_tensors());  // one fused pass: x 1/scale, detect inf / NaN
    scaler.update();
    opt.step().clear_grad();                // skipped on the device after an overflow
    // The loss, the scale and the skipped steps (those the optimizer did not
    // count) are read from the device only when printed: a read per step
    // (found_non_finite(), item()) would wait for the device every step.
    if (step % 25 == 0 || step == 1)
      std::printf("step %4d  loss %.4f  scale %g  skipped so far %lld\n", step, total.item<double>(),
                  scaler.scale_factor(), static_cast<long long>(step - opt.step_count(0)));
  }
  const auto predicted = mg::F::argmax(net(x), 1);
  const double accuracy = mg::F::mean(mg::F::astype(mg::F::eq(predicted, labels), mg::DType::float32)).item<double>();
  std::printf("train accuracy %.1f%%\n", 100 * accuracy);
  return accuracy > 0.9 ? 0 : 1;
}
