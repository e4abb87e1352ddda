// mixgrad/functional.hpp — every op, as `mixgrad::F::name` (MegEngine's
// `F.` and PyTorch's `torch.nn.functional`).
#pragma once

#include "mixgrad/ops/addmm_activation.hpp"
#include "mixgrad/ops/attention.hpp"
#include "mixgrad/ops/conv1d_variants.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/cumprod.hpp"
#include "mixgrad/ops/distance.hpp"
#include "mixgrad/ops/einsum.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/indexing.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "mixgrad/ops/loss.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/resize.hpp"
#include "mixgrad/ops/rotary_embedding.hpp"
#include "mixgrad/ops/scan.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "mixgrad/ops/sorting.hpp"
