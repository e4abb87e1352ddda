// Device tests of the edge cases a read-through of the CUDA backend found
// wrong before any of it had run on a GPU (docs/cuda.md, "Review before the
// first GPU run"): each case is one the CPU handles and the device got wrong
// or refused. Part of the test_cuda_device executable, whose main exits 77
// without a device.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "device_test_support.hpp"
#include "mixgrad/mixgrad.hpp"

using namespace device_test;

BOOST_AUTO_TEST_SUITE(cuda_device_review)

// No classes: every label is out of [0, 0). The row kernel has no row to
// run, and the loss must still be the CPU's bad-label error, not a reduction
// of scratch nobody wrote.
BOOST_AUTO_TEST_CASE(a_class_loss_with_no_classes_reports_the_first_label_as_bad) {
  const mg::Tensor labels = mg::tensor<int64_t>({0, 0, 0}, {3});
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor logits = mg::zeros({3, 0}, dt);
      std::string cpu_what;
      try {
        (void)mg::F::cross_entropy(logits, labels);
        BOOST_ERROR("the CPU accepted labels with no classes");
      } catch (const mg::ValueError& e) {
        cpu_what = e.what();
      }
      try {
        const mg::Tensor loss = mg::F::cross_entropy(logits.to(kGpu), labels.to(kGpu));
        (void)loss.item<double>();  // the deferred label check runs here at the latest
        BOOST_ERROR("the device reduced a loss over no classes without an error");
      } catch (const mg::ValueError& e) {
        // The CPU's report (the descriptions differ only by the device suffix).
        const std::string what = e.what();
        BOOST_TEST(cpu_what.find("label 0 at index 0") != std::string::npos, cpu_what);
        BOOST_TEST(what.find("label 0 at index 0") != std::string::npos, what);
        BOOST_TEST(what.find("with 0 classes") != std::string::npos, what);
      }
      BOOST_CHECK_THROW((void)mg::F::nll_loss(logits.to(kGpu), labels.to(kGpu)).item<double>(), mg::ValueError);
    }
  }
}

// An empty input (no input channels; or no rows, which the padding still
// turns into outputs) convolves to zeros plus the bias. cuDNN refuses
// descriptors with an extent of 0, so the device must not build any.
BOOST_AUTO_TEST_CASE(a_convolution_of_an_empty_input_is_the_bias_as_on_the_cpu) {
  struct C {
    std::string name;
    mg::Shape x, w;
    mg::F::Conv2dOptions o;
  };
  const std::vector<C> cases = {
      {"no input channels", {2, 0, 4, 4}, {3, 0, 3, 3}, {.padding = 1}},
      {"no input rows, padded", {1, 2, 0, 3}, {3, 2, 1, 1}, {.padding = 1}},
  };
  for (const C& c : cases) {
    for (mg::DType dt : kFloatingDTypes) {
      BOOST_TEST_CONTEXT(c.name << " in " << dt) {
        const std::vector<mg::Tensor> inputs = {mg::uniform(c.x, -1.0, 1.0).to(dt), mg::uniform(c.w, -1.0, 1.0).to(dt),
                                                mg::uniform({c.w[0]}, -1.0, 1.0).to(dt)};
        const mg::F::Conv2dOptions o = c.o;
        check_against_cpu([o](const auto& v) { return mg::F::conv2d(v[0], v[1], v[2], o); }, inputs,
                          kSumTolerances.of(dt), seeded_normal(5));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
