# OpenBLAS, which attograd loads at run time instead of linking it
# (attograd/autograd/backend/blas_kernel.h says why): attograd::tensor compiles against
# its cblas.h and dlopen()s libopenblas.so.0, or else the file found here.
# Nothing of it reaches a consumer at build time (no include path, no link
# flag); OpenBLAS' shared library is needed at run time (the .deb depends on
# libopenblas0, cmake/package.cmake).
list(GET OPENBLAS_LINK_LIBRARIES 0 ATTOGRAD_OPENBLAS_FILE)
target_include_directories(attograd_tensor SYSTEM PRIVATE ${OPENBLAS_INCLUDE_DIRS})
set_property(SOURCE ${PROJECT_SOURCE_DIR}/attograd/autograd/backend/blas_kernel.cpp APPEND PROPERTY COMPILE_DEFINITIONS
             ATTOGRAD_OPENBLAS_FILE="${ATTOGRAD_OPENBLAS_FILE}")
target_link_libraries(attograd_tensor PRIVATE ${CMAKE_DL_LIBS})
