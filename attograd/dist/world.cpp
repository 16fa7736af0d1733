// world() in a build without MPI (ATTOGRAD_MPI off): always the world of one.
#include <attograd/autograd/error.h>
#include <attograd/dist/communicator.h>

namespace attograd::dist {

Communicator& world() {
  static Communicator one;
  if (launched_by_mpirun())
    fail<ValueError>("dist", "started by mpirun, but this build has no MPI, so every process would train alone; "
                     "hint: install libopenmpi-dev and configure with -DATTOGRAD_MPI=ON");
  return one;
}

}  // namespace attograd::dist
