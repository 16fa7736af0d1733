// libFuzzer entry point for the pairs target (fuzz/targets.h says what it checks).
#include <cstddef>
#include <cstdint>

#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attograd::fuzz::pairs(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
