// mixgrad/nn.hpp — modules and layers (mg::nn::{Module, Sequential, Linear,
// Conv2d, BatchNorm2d, ...}) and initialisers (mg::nn::init).
//
//   auto net = mg::nn::Sequential(mg::nn::Linear(784, 128), mg::nn::ReLU(), mg::nn::Linear(128, 10));
#pragma once

#include "mixgrad/nn/activation.hpp"
#include "mixgrad/nn/batch_norm.hpp"
#include "mixgrad/nn/conv.hpp"
#include "mixgrad/nn/dropout.hpp"
#include "mixgrad/nn/embedding.hpp"
#include "mixgrad/nn/checkpoint.hpp"
#include "mixgrad/nn/flatten.hpp"
#include "mixgrad/nn/group_norm.hpp"
#include "mixgrad/nn/init.hpp"
#include "mixgrad/nn/kv_cache.hpp"
#include "mixgrad/nn/layer_norm.hpp"
#include "mixgrad/nn/linear.hpp"
#include "mixgrad/nn/module.hpp"
#include "mixgrad/nn/multihead_attention.hpp"
#include "mixgrad/nn/pooling.hpp"
#include "mixgrad/nn/rms_norm.hpp"
#include "mixgrad/nn/rnn.hpp"
#include "mixgrad/nn/rotary_embedding.hpp"
#include "mixgrad/nn/sequential.hpp"
#include "mixgrad/nn/transformer.hpp"
#include "mixgrad/nn/transformer_decoder_layer.hpp"
