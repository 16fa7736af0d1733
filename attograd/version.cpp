#include <attograd/version.h>

namespace attograd {

const char* version() { return ATTOGRAD_VERSION_STRING; }

BuildFeatures build_features() {
  return {.sentencepiece = ATTOGRAD_HAS_SENTENCEPIECE != 0,
          .sleef = ATTOGRAD_HAS_SLEEF != 0,
          .xsmm = ATTOGRAD_HAS_XSMM != 0,
          .mpi = ATTOGRAD_HAS_MPI != 0};
}

}  // namespace attograd
