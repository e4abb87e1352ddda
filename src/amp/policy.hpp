// The autocast policy table: what each op does with its floating inputs
// while autocast is enabled.
#pragma once

#include "ops/op_kind.hpp"

namespace mixgrad::amp {

enum class CastPolicy : uint8_t {
  low,      // cast floating inputs to the low-precision dtype (matmul, conv)
  high,     // cast floating inputs to the high-precision dtype (softmax, losses)
  promote,  // cast floating inputs to the widest of them (add, concat)
  keep,     // run in the inputs' own dtype
};

CastPolicy policy(OpKind op);

}  // namespace mixgrad::amp
