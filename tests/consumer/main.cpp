// A program that uses mixgrad the way a user's project does: public headers
// only (no src/, no build-tree configuration). Built twice by the tests:
// against an installed tree through pkg-config, and with mixgrad as a Meson
// subproject. Exits 0 when the library answers as documented.
#include <mixgrad/mixgrad.hpp>

#include <cstdio>
#include <vector>

namespace mg = mixgrad;

int main() {
  mg::manual_seed(0);
  const mg::Tensor w = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  {
    auto recording = gm.record();
    const mg::Tensor y = mg::F::transpose(w, 0, 1).narrow(0, 1, 2).reshape({4});
    gm.backward(y, mg::full({4}, 2.0));
  }
  const std::vector<float> grad = w.grad().to_vector<float>();
  const std::vector<float> want = {0, 2, 2, 0, 2, 2};
  bool ok = grad == want;
  {
    mg::amp::autocast scope;
    ok = ok && mg::amp::current_state().enabled;
  }
  ok = ok && !mg::amp::current_state().enabled;
  ok = ok && w.to(mg::DType::bfloat16).to(mg::DType::float32).at<float>({1, 2}) == 6.f;
  try {
    mg::F::reshape(w, {4});
    ok = false;
  } catch (const mg::ShapeError&) {
  }
  std::printf("mixgrad consumer: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
