// Several losses, models and optimizers: a tiny GAN with one GradManager,
// optimizer and GradScaler per network (apex's num_losses = 2). The
// generator learns to produce points around (2, -1).
//
//   build/examples/amp_two_losses [steps]
#include <cstdio>
#include <cstdlib>

#include <mixgrad/mixgrad.hpp>

namespace mg = mixgrad;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 600;
  mg::manual_seed(3);
  constexpr int64_t kBatch = 128;

  auto gen = mg::nn::Sequential(mg::nn::Linear(4, 32), mg::nn::ReLU(), mg::nn::Linear(32, 2));
  auto disc = mg::nn::Sequential(mg::nn::Linear(2, 32), mg::nn::ReLU(), mg::nn::Linear(32, 1));
  mg::autodiff::GradManager gm_g, gm_d;
  gm_g.attach(gen.parameters());
  gm_d.attach(disc.parameters());
  mg::optim::Adam opt_g(gen.parameters(), {.lr = 2e-3, .betas = {0.5, 0.999}});
  mg::optim::Adam opt_d(disc.parameters(), {.lr = 2e-3, .betas = {0.5, 0.999}});
  mg::amp::GradScaler scaler_g, scaler_d;  // one scaler per loss
  const auto ones = mg::ones({kBatch, 1}), zeros = mg::zeros({kBatch, 1});
  const auto center = mg::tensor({2.f, -1.f}, {1, 2});

  for (int step = 1; step <= steps; ++step) {
    mg::amp::autocast scope(true, mg::DType::float16);
    const auto real = mg::F::add(mg::F::mul(mg::normal({kBatch, 2}), 0.3), center);
    const auto noise = mg::normal({kBatch, 4});

    mg::Tensor loss_d;  // discriminator: real -> 1, fake -> 0 (fake detached: D's step only)
    {
      auto rec = gm_d.record();
      const auto fake = gen(noise).detach();
      loss_d = mg::F::add(mg::F::binary_cross_entropy_with_logits(disc(real), ones),
                          mg::F::binary_cross_entropy_with_logits(disc(fake), zeros));
      scaler_d.backward(gm_d, loss_d);
    }
    opt_d.step().clear_grad();

    mg::Tensor loss_g;  // generator: make D say 1; only gm_g's tensors get grads
    {
      auto rec = gm_g.record();
      loss_g = mg::F::binary_cross_entropy_with_logits(disc(gen(noise)), ones);
      scaler_g.backward(gm_g, loss_g);
    }
    opt_g.step().clear_grad();

    // item() and scale_factor() wait for the device: read only when printed.
    if (step % 100 == 0 || step == 1)
      std::printf("step %4d  loss_d %.3f  loss_g %.3f  scales %g / %g\n", step, loss_d.item<float>(),
                  loss_g.item<float>(), scaler_d.scale_factor(), scaler_g.scale_factor());
  }
  const auto samples = gen(mg::normal({1000, 4}));
  const auto mean = mg::F::mean(samples, 0).to_vector<float>();
  std::printf("generated mean (%.2f, %.2f), target (2.00, -1.00)\n", mean[0], mean[1]);
  const bool close = std::abs(mean[0] - 2.f) < 0.5f && std::abs(mean[1] + 1.f) < 0.5f;
  return close ? 0 : 1;
}
