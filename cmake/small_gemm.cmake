# The small-GEMM libraries behind attograd's GEMM layer
# (autograd/backend/small_gemm.h): libxsmm's JIT kernels (Debian libxsmm-dev,
# a static library with a .pc file) and BLIS (libblis-dev: a shared library,
# no .pc file). attograd::tensor links them privately; a static attograd
# passes them on to its consumers (attogradConfig.cmake, attograd.pc, the .deb).
# BLIS exports cblas_sgemm and sgemm_ too, so it goes on the link line after
# OpenBLAS: those names must stay OpenBLAS' (tests/test_gemm_backends.cpp).
pkg_check_modules(LIBXSMM IMPORTED_TARGET libxsmm)
find_path(BLIS_INCLUDE_DIR blis.h PATH_SUFFIXES blis)
find_library(BLIS_LIBRARY blis)
if(NOT LIBXSMM_FOUND OR NOT BLIS_INCLUDE_DIR OR NOT BLIS_LIBRARY)
  message(FATAL_ERROR "attograd's GEMM layer needs libxsmm and BLIS (found: libxsmm ${LIBXSMM_FOUND}, "
          "blis.h ${BLIS_INCLUDE_DIR}, libblis ${BLIS_LIBRARY}): apt install libxsmm-dev libblis-dev "
          "(scripts/setup lists them)")
endif()
target_include_directories(attograd_tensor SYSTEM PRIVATE ${BLIS_INCLUDE_DIR})
target_link_libraries(attograd_tensor PRIVATE PkgConfig::LIBXSMM blis)
