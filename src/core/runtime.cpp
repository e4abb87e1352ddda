#include "mixgrad/runtime.hpp"

#include <omp.h>

#include <string>

#include "mixgrad/error.hpp"

namespace mixgrad {

void set_num_threads(int n) {
  if (n < 1) throw ValueError("set_num_threads: need at least 1 thread, got " + std::to_string(n));
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace mixgrad
