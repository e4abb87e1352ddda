// mixgrad/distributed.hpp — data-parallel training (MPI, NCCL): the
// process group, collectives, the gradient all-reducer and the sampler.
// Link with the mixgrad_distributed library (pkg-config mixgrad-distributed);
// docs/distributed.md shows a whole run.
#pragma once

#include "mixgrad/distributed/collectives.hpp"
#include "mixgrad/distributed/distributed_sampler.hpp"
#include "mixgrad/distributed/grad_reducer.hpp"
#include "mixgrad/distributed/process_group.hpp"
