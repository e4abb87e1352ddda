// The optimizer updates' contiguous loops run as portable code or inside an
// AVX-512 target function (core/simd.hpp): SGD (momentum, Nesterov) and
// Adam / AMSGrad / AdamW give the same parameters both ways, to rounding
// (fused multiply-adds), over several steps, on float32 and bfloat16
// parameters and lengths that leave vector tails.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "core/simd.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/optim.hpp"

namespace mg = mixgrad;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<mg::optim::Optimizer>(std::vector<mg::Tensor>)>;

std::vector<std::vector<double>> train(const MakeOptimizer& make, mg::DType dt) {
  mg::manual_seed(3);
  std::vector<mg::Tensor> params{mg::normal({37}, 0, 1, dt), mg::normal({70001}, 0, 1, dt)};
  auto opt = make(params);
  for (int step = 0; step < 4; ++step) {
    mg::manual_seed(100 + static_cast<uint64_t>(step));
    for (auto& p : params) p.set_grad(mg::normal(p.shape(), 0, 1, dt));
    opt->step();
  }
  std::vector<std::vector<double>> out;
  for (const auto& p : params) out.push_back(p.to_vector<double>());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(portable_and_avx512_updates_agree) {
  if (mg::simd::available() != mg::simd::Level::avx512) return;
  const std::vector<std::pair<const char*, MakeOptimizer>> makers{
      {"sgd momentum", [](std::vector<mg::Tensor> p) {
         return std::make_unique<mg::optim::SGD>(p, mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
       }},
      {"sgd nesterov", [](std::vector<mg::Tensor> p) {
         return std::make_unique<mg::optim::SGD>(p, mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
       }},
      {"adam", [](std::vector<mg::Tensor> p) {
         return std::make_unique<mg::optim::Adam>(p, mg::optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01});
       }},
      {"amsgrad", [](std::vector<mg::Tensor> p) {
         return std::make_unique<mg::optim::Adam>(p, mg::optim::AdamOptions{.lr = 0.01, .amsgrad = true});
       }},
      {"adamw", [](std::vector<mg::Tensor> p) {
         return std::make_unique<mg::optim::AdamW>(p, mg::optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
       }},
  };
  for (const auto& [name, make] : makers)
    for (mg::DType dt : {mg::DType::float32, mg::DType::bfloat16}) {
      BOOST_TEST_CONTEXT(name << " " << mg::to_string(dt)) {
        std::vector<std::vector<double>> portable;
        {
          mg::simd::LevelScope scope(mg::simd::Level::portable);
          portable = train(make, dt);
        }
        const auto wide = train(make, dt);
        const double tol = dt == mg::DType::float32 ? 1e-5 : 1e-2;
        for (size_t k = 0; k < wide.size(); ++k)
          for (size_t i = 0; i < wide[k].size(); ++i)
            BOOST_TEST(std::abs(portable[k][i] - wide[k][i]) <= tol * (1 + std::abs(portable[k][i])),
                       "tensor " << k << " element " << i);
      }
    }
}
