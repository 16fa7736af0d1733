# The small-GEMM library behind attograd's GEMM layer
# (attograd/autograd/backend/small_gemm.h): libxsmm's JIT kernels (Debian libxsmm-dev,
# a static library with a .pc file), with ATTOGRAD_XSMM (on when found:
# CMakeLists.txt finds both libraries below). attograd::tensor links it privately; a
# static attograd passes it on to its consumers (attogradConfig.cmake,
# attograd.pc, the .deb). Without it small_gemm.cpp has no kernels and the
# router sends every product to OpenBLAS.
# libxsmm calls the Fortran BLAS (sgemm_, dgemm_) as its own fallback, which
# attograd never asks for; attograd links no BLAS (OpenBLAS is loaded at run
# time: cmake/openblas.cmake), so libxsmmnoblas, libxsmm's stubs for those
# names, must come after libxsmm.a on every link line: it is made part of the
# imported target's own link list (a plain item beside it would be placed
# before the target's libraries, which leaves a shared libattograd_tensor.so
# with undefined sgemm_). (BLIS was linked here until issue 30:
# docs/performance.md says why it went.)
if(NOT ATTOGRAD_XSMM)
  return()
endif()
get_target_property(attograd_xsmm_libs PkgConfig::LIBXSMM INTERFACE_LINK_LIBRARIES)
if(NOT "${LIBXSMM_NOBLAS_LIBRARY}" IN_LIST attograd_xsmm_libs)
  set_property(TARGET PkgConfig::LIBXSMM APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${LIBXSMM_NOBLAS_LIBRARY})
endif()
target_link_libraries(attograd_tensor PRIVATE PkgConfig::LIBXSMM)
