// libFuzzer entry point for the model target (fuzz/model_target.h says what it checks).
#include <cstddef>
#include <cstdint>

#include "model_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attograd::fuzz::model(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
