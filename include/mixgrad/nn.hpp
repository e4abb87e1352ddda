// mixgrad/nn.hpp — modules and layers: mg::nn::{Module, Sequential, ...} and
// mg::nn::init.
//
//   auto net = mg::nn::Sequential(mg::nn::Linear(784, 128), mg::nn::ReLU(), mg::nn::Linear(128, 10));
#pragma once

#include "mixgrad/nn/init.hpp"
#include "mixgrad/nn/module.hpp"
#include "mixgrad/nn/sequential.hpp"
