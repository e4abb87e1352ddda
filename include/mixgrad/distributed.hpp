// mixgrad/distributed.hpp — training on several processes (MPI, NCCL): the
// process group, collectives, the recorded collectives of
// distributed::functional, the gradient all-reducer, the sharded optimizer
// (ZeRO stages 1 and 2) and the sampler.
// Link with the mixgrad_distributed library (pkg-config mixgrad-distributed);
// docs/distributed.md shows a whole run.
#pragma once

#include "mixgrad/distributed/collectives.hpp"
#include "mixgrad/distributed/distributed_sampler.hpp"
#include "mixgrad/distributed/functional.hpp"
#include "mixgrad/distributed/grad_reducer.hpp"
#include "mixgrad/distributed/process_group.hpp"
#include "mixgrad/distributed/sharded_optimizer.hpp"
