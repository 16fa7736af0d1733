#include <attograd/autograd/backend/blas_kernel.h>

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace attograd {

namespace {

// Set (to the requested core) in the environment of the re-executed process.
constexpr const char* kMarker = "ATTOGRAD_SET_OPENBLAS_CORETYPE";

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

bool blas_is_dynamic_arch() {
  const char* cfg = openblas_get_config();
  return cfg && std::strstr(cfg, "DYNAMIC_ARCH") != nullptr;
}

}  // namespace

std::string blas_corename() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x6u) == 0x6u;     // SSE + AVX state
  const bool zmm_state = (xcr0_lo & 0xe6u) == 0xe6u;   // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_state || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = b & (1u << 5);
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));  // F DQ BW VL
  f.avx512 = avx512 && zmm_state;
  if (f.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = a & (1u << 5);
#endif
  return f;
}

std::string best_openblas_core(const CpuFeatures& f) {
  if (f.avx512 && f.avx512_bf16) return "Cooperlake";
  if (f.avx512) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  return "";
}

bool is_generic_openblas_core(const std::string& corename) {
  static constexpr std::array<const char*, 12> kGeneric = {
      "Prescott", "Katmai", "Coppermine", "Northwood", "Core2", "Penryn",
      "Dunnington", "Nehalem", "Atom", "Opteron", "Barcelona", "Unknown"};
  if (corename.empty()) return true;
  for (const char* g : kGeneric)
    if (strcasecmp(corename.c_str(), g) == 0) return true;
  return false;
}

std::optional<std::string> openblas_core_to_request(const std::string& current, const CpuFeatures& f,
                                                    const std::optional<std::string>& user_setting,
                                                    bool dynamic_arch, bool already_tried) {
  if (user_setting || already_tried || !dynamic_arch) return std::nullopt;
  if (!is_generic_openblas_core(current)) return std::nullopt;
  const std::string best = best_openblas_core(f);
  if (best.empty()) return std::nullopt;
  return best;
}

void ensure_fast_blas_kernel() {
  const auto core = openblas_core_to_request(blas_corename(), cpu_features(), env("OPENBLAS_CORETYPE"),
                                             blas_is_dynamic_arch(), env(kMarker).has_value());
  if (!core) return;
  // argv as the kernel recorded it: NUL-separated.
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t pos = 0; pos < cmdline.size();) {
    const size_t end = cmdline.find('\0', pos);
    args.push_back(cmdline.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  if (args.empty()) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  setenv("OPENBLAS_CORETYPE", core->c_str(), 1);
  setenv(kMarker, core->c_str(), 1);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv.data());
  // exec failed: carry on with the slow kernel; the first GEMM warns.
  unsetenv("OPENBLAS_CORETYPE");
}

void warn_if_slow_blas_kernel() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string current = blas_corename();
    const std::string best = best_openblas_core(cpu_features());
    if (!is_generic_openblas_core(current) || best.empty()) return;
    const auto user = env("OPENBLAS_CORETYPE");
    std::string why;
    if (!blas_is_dynamic_arch()) why = "this OpenBLAS is not a DYNAMIC_ARCH build; hint: install Debian's libopenblas0-pthread";
    else if (user && !env(kMarker)) why = fmt::format("OPENBLAS_CORETYPE={} is set", *user);
    else why = fmt::format("hint: run with OPENBLAS_CORETYPE={}, or call attograd::ensure_fast_blas_kernel() first "
                           "thing in main()", best);
    fmt::print(stderr, "attograd: warning: OpenBLAS runs its generic '{}' kernels although this CPU supports '{}' "
               "(several times faster); {}\n", current, best, why);
  });
}

}  // namespace attograd
