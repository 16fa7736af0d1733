// libFuzzer entry point for the mo target (fuzz/mo_target.h says what it checks).
#include <cstddef>
#include <cstdint>

#include "mo_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attograd::fuzz::mo(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
