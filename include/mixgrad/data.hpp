// mixgrad/data.hpp — datasets and batching: mg::data::{FashionMNIST,
// TensorDataset, DataLoader}.
//
//   mg::data::DataLoader loader(mg::data::FashionMNIST(), {.batch_size = 128, .shuffle = true});
//   for (const auto& [x, y] : loader) { ... }
#pragma once

#include "mixgrad/data/data_loader.hpp"
#include "mixgrad/data/dataset.hpp"
#include "mixgrad/data/fashion_mnist.hpp"
