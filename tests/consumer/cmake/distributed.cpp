// Links mixgrad::distributed through CMake: the header compiles without
// MPI's, and the library resolves (no process group is started).
#include <mixgrad/distributed.hpp>

int main() { return mixgrad::distributed::parse_reduce_op("sum") == mixgrad::distributed::ReduceOp::sum ? 0 : 1; }
