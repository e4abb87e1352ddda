#include "mixgrad/data/fashion_mnist.hpp"

#include <filesystem>
#include <memory>
#include <vector>

#include "data/idx_file.hpp"
#include "kernels/loops.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mixgrad::data {

namespace {

constexpr int64_t kNumClasses = 10;

// The raw pixels as a uint8 tensor that owns the bytes read from the file.
Tensor raw_images(idx::UByteArray&& images, int64_t n) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(images.values));
  uint8_t* data = bytes->data();
  return from_blob(data, {n, 1, 28, 28}, DType::uint8, Device::cpu(), [bytes](void*) mutable { bytes.reset(); });
}

TensorDataset load(const std::string& root, Split split, const FashionMNISTOptions& o) {
  if (o.dtype != DType::uint8 && !is_floating_point(o.dtype))
    throw DTypeError("FashionMNIST: images can be uint8 (raw pixels) or a floating dtype, got " +
                     std::string(to_string(o.dtype)));
  if (o.dtype != DType::uint8 && o.normalize && !(o.std > 0))
    throw ValueError("FashionMNIST: normalisation std must be > 0, got " + std::to_string(o.std));
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::filesystem::path dir(root);
  const std::string images_path = (dir / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (dir / (prefix + "-labels-idx1-ubyte.gz")).string();
  const std::string hint =
      "; install the dataset with `apt-get install dataset-fashion-mnist` (files go to " +
      std::string(FashionMNIST::kDefaultRoot) + ") or pass the directory holding it";

  idx::UByteArray images, labels;
  try {
    images = idx::read_ubyte(images_path, 3, {.expected_dims = {-1, 28, 28}, .hint = hint});
    labels = idx::read_ubyte(labels_path, 1, {.hint = hint});
  } catch (const IOError& e) {
    throw IOError(std::string("FashionMNIST: ") + e.what());
  }
  const int64_t n = images.dims[0];
  if (labels.dims[0] != n)
    throw IOError("FashionMNIST: " + images_path + " holds " + std::to_string(n) + " images but " + labels_path +
                  " holds " + std::to_string(labels.dims[0]) + " labels");

  Tensor y = empty({n}, DType::int64);
  int64_t* yd = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    yd[i] = labels.values[i];
    if (yd[i] >= kNumClasses)
      throw IOError("FashionMNIST: " + labels_path + ": label " + std::to_string(yd[i]) + " of sample " +
                    std::to_string(i) + " is not a class in 0..9");
  }
  if (o.dtype == DType::uint8) return TensorDataset(raw_images(std::move(images), n), y);

  Tensor x = empty({n, 1, 28, 28}, DType::float32);
  const double scale = o.normalize ? 1.0 / (255.0 * o.std) : 1.0 / 255.0;
  const double shift = o.normalize ? -o.mean / o.std : 0.0;
  const float fscale = static_cast<float>(scale), fshift = static_cast<float>(shift);
  float* xd = x.data<float>();
  const uint8_t* src = images.values.data();
  kernels::parallel_for(x.numel(), kernels::kParallelGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) xd[i] = static_cast<float>(src[i]) * fscale + fshift;
  });
  return TensorDataset(o.dtype == DType::float32 ? x : x.to(o.dtype), y);
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, Split split, const FashionMNISTOptions& options)
    : TensorDataset(load(root, split, options)) {}

FashionMNIST::FashionMNIST(Split split, const FashionMNISTOptions& options)
    : FashionMNIST(std::string(kDefaultRoot), split, options) {}

}  // namespace mixgrad::data
