#include <attograd/autograd/settings.h>

#include <attograd/autograd/backend/vecmath.h>

namespace attograd {

// Each getter reads its variable once (a bad value throws from there), so
// asking for the three values is the check.
void read_settings_from_environment() {
  gemm_backend();
  memory_options();
  vecmath();
}

}  // namespace attograd
