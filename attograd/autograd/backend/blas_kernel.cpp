#include <attograd/autograd/backend/blas_kernel.h>

#include <dlfcn.h>
#include <strings.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include <cblas.h>
#include <fmt/format.h>

#include <attograd/autograd/error.h>

// The file the build found OpenBLAS in (cmake/openblas.cmake); tried after the soname.
#ifndef ATTOGRAD_OPENBLAS_FILE
#define ATTOGRAD_OPENBLAS_FILE "libopenblas.so"
#endif

namespace attograd {

namespace {

// OpenBLAS' soname in Debian, Fedora, Arch and conda alike; then the build's file.
constexpr std::array<const char*, 2> kOpenBlasFiles = {"libopenblas.so.0", ATTOGRAD_OPENBLAS_FILE};

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// Sets an environment variable for its lifetime, then puts back what was
// there (the value, or its absence): OpenBLAS' constructor reads its
// variables during dlopen, afterwards the environment is the user's again.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name), saved_(env(name)) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (saved_)
      setenv(name_, saved_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// The loaded library and the functions attograd calls in it.
struct OpenBlas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  void (*set_num_threads)(int) = nullptr;
  int (*get_num_threads)() = nullptr;
  OpenBlasLoad load;
};

// OpenBLAS if something in the process loaded it already, else nullptr.
void* already_loaded_openblas() {
  for (const char* file : kOpenBlasFiles)
    if (void* handle = dlopen(file, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) return handle;
  return nullptr;
}

// Local: OpenBLAS' BLAS names never become the process' (nor interpose on another BLAS).
void* load_openblas_file() {
  std::string errors;
  for (const char* file : kOpenBlasFiles) {
    if (void* handle = dlopen(file, RTLD_NOW | RTLD_LOCAL)) return handle;
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", dlerror());
  }
  fail<Error>("openblas", "cannot load OpenBLAS, which every GEMM needs ({}); hint: apt install libopenblas0", errors);
}

template <class Fn>
Fn symbol(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  if (!p)
    fail<Error>("openblas", "the loaded OpenBLAS has no function {}; expected OpenBLAS 0.3 or later; hint: apt install "
                "libopenblas0", name);
  return reinterpret_cast<Fn>(p);
}

OpenBlas load_openblas() {
  const CpuFeatures cpu = cpu_features();
  OpenBlas lib;
  lib.load.user_setting = env("OPENBLAS_CORETYPE");
  void* handle = already_loaded_openblas();
  lib.load.loaded_before = handle != nullptr;
  if (!handle) {
    const auto core = openblas_core_to_request(cpu, lib.load.user_setting, false);
    std::optional<ScopedEnv> coretype;
    if (core) coretype.emplace("OPENBLAS_CORETYPE", *core);
    // One thread at the load: otherwise the constructor starts a worker per
    // core, and they spin (about 0.1 s) before they sleep, beside the pool's
    // threads: a 1-thread process showed twice its wall time in CPU time over
    // its first tenth of a second.
    const ScopedEnv one_thread("OPENBLAS_NUM_THREADS", "1");
    handle = load_openblas_file();
  }
  lib.sgemm = symbol<decltype(&cblas_sgemm)>(handle, "cblas_sgemm");
  lib.dgemm = symbol<decltype(&cblas_dgemm)>(handle, "cblas_dgemm");
  lib.set_num_threads = symbol<void (*)(int)>(handle, "openblas_set_num_threads");
  lib.get_num_threads = symbol<int (*)()>(handle, "openblas_get_num_threads");
  const char* corename = symbol<char* (*)()>(handle, "openblas_get_corename")();
  const char* config = symbol<char* (*)()>(handle, "openblas_get_config")();
  lib.load.corename = corename ? corename : "";
  lib.load.dynamic_arch = config && std::strstr(config, "DYNAMIC_ARCH") != nullptr;
  // One thread from the load on, even in an OpenBLAS the program loaded: the pool splits large products (blas.h).
  lib.set_num_threads(1);
  if (const auto warning = slow_kernel_warning(lib.load, cpu))
    fmt::print(stderr, "attograd: warning: {}\n", *warning);
  return lib;
}

// Loaded at the first call, once (a failed load throws, and the next call tries again).
const OpenBlas& openblas() {
  static const OpenBlas lib = load_openblas();
  return lib;
}

CBLAS_TRANSPOSE cblas_trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

}  // namespace

std::string blas_corename() { return openblas().load.corename; }

OpenBlasLoad openblas_load() { return openblas().load; }

std::string openblas_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(openblas().sgemm), &info) == 0 || !info.dli_fname) return "";
  return info.dli_fname;
}

std::string best_openblas_core(const CpuFeatures& f) {
  if (f.avx512) return "SkylakeX";  // with BF16 too: see blas_kernel.h
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

std::optional<std::string> openblas_core_to_request(const CpuFeatures& f,
                                                    const std::optional<std::string>& user_setting,
                                                    bool loaded_before) {
  if (user_setting || loaded_before) return std::nullopt;
  const std::string best = best_openblas_core(f);
  if (best.empty()) return std::nullopt;
  return best;
}

std::optional<std::string> slow_kernel_warning(const OpenBlasLoad& load, const CpuFeatures& f) {
  const std::string best = best_openblas_core(f);
  if (!is_generic_openblas_core(load.corename) || best.empty()) return std::nullopt;
  std::string why;
  if (load.user_setting)
    why = fmt::format("OPENBLAS_CORETYPE={} is set; hint: unset it, or set OPENBLAS_CORETYPE={}", *load.user_setting,
                      best);
  else if (load.loaded_before)
    why = fmt::format("OpenBLAS was loaded before attograd needed it (the program or another library links it), so "
                      "its kernel could no longer be chosen; hint: run with OPENBLAS_CORETYPE={}", best);
  else if (!load.dynamic_arch)
    why = "this OpenBLAS is not a DYNAMIC_ARCH build and cannot switch; hint: install Debian's libopenblas0-pthread";
  else
    why = fmt::format("OPENBLAS_CORETYPE={} was requested but did not take effect; hint: check that this OpenBLAS "
                      "has that core", best);
  return fmt::format("OpenBLAS runs its generic '{}' kernels although this CPU supports '{}' (several times faster on "
                     "GEMM); {}", load.corename, best, why);
}

void openblas_gemm(float* out, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                   bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta) {
  openblas().sgemm(CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b), static_cast<blasint>(M),
                   static_cast<blasint>(N), static_cast<blasint>(K), alpha, a, static_cast<blasint>(lda), b,
                   static_cast<blasint>(ldb), beta, out, static_cast<blasint>(ldc));
}

void openblas_gemm(double* out, const double* a, const double* b, int64_t M, int64_t N, int64_t K, bool trans_a,
                   bool trans_b, int64_t lda, int64_t ldb, int64_t ldc, double alpha, double beta) {
  openblas().dgemm(CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b), static_cast<blasint>(M),
                   static_cast<blasint>(N), static_cast<blasint>(K), alpha, a, static_cast<blasint>(lda), b,
                   static_cast<blasint>(ldb), beta, out, static_cast<blasint>(ldc));
}

void openblas_set_threads(int n) { openblas().set_num_threads(n); }
int openblas_threads() { return openblas().get_num_threads(); }

}  // namespace attograd
