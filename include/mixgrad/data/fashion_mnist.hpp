// mixgrad/data/fashion_mnist.hpp — the Fashion-MNIST dataset (Xiao et al.,
// 2017): 28x28 grey images of clothes in 10 classes, 60000 for training and
// 10000 for testing, read from the four gzipped IDX files.
//
//   mg::data::FashionMNIST train;                                   // default directory, Split::train
//   mg::data::FashionMNIST test("/data/fmnist", mg::data::Split::test);
//   train.images();   // float32 [60000, 1, 28, 28], (x/255 - 0.2860) / 0.3530
//   train.labels();   // int64 [60000], 0..9
//   mg::data::FashionMNIST raw(mg::data::Split::test, {.dtype = mg::DType::uint8});
//   raw.images();     // uint8 [10000, 1, 28, 28], the file's bytes 0..255
//   mg::data::FashionMNIST::kClassNames[train.labels().at<int64_t>({0})];
//
// The files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
// t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) come with the Debian
// package dataset-fashion-mnist. A missing, truncated or malformed file
// throws IOError naming the file and the problem.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "mixgrad/data/dataset.hpp"

namespace mixgrad::data {

enum class Split : uint8_t { train, test };

struct FashionMNISTOptions {
  /// When true, pixels become (x / 255 - mean) / std; when false, x / 255.
  /// Ignored for uint8 images.
  bool normalize = true;
  double mean = 0.2860;  // of the training pixels in [0, 1]
  double std = 0.3530;
  /// The images' dtype: float32, another floating dtype (the float32 values
  /// converted), or uint8 for the raw pixels 0..255 as stored in the file
  /// (no scaling, no copy: torchvision's `dataset.data`). DTypeError for
  /// any other dtype.
  DType dtype = DType::float32;
};

class FashionMNIST : public TensorDataset {
 public:
  static constexpr std::string_view kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr std::array<std::string_view, 10> kClassNames = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

  /// Reads `split` from the directory `root`.
  explicit FashionMNIST(const std::string& root = std::string(kDefaultRoot), Split split = Split::train,
                        const FashionMNISTOptions& options = {});
  /// Reads `split` from the default directory.
  explicit FashionMNIST(Split split, const FashionMNISTOptions& options = {});
};

}  // namespace mixgrad::data
