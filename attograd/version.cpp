#include <attograd/version.h>

namespace attograd {

const char* version() { return ATTOGRAD_VERSION_STRING; }

}  // namespace attograd
