# Install rules (ATTOGRAD_INSTALL, on when attograd is the top-level project):
#   include/attograd/...                    public headers, attograd.h, version.h
#   lib/libattograd_{tensor,autograd,nn,optim,data,dist}.a   (.so with BUILD_SHARED_LIBS)
#   lib/cmake/attograd/                     find_package(attograd 0.1 CONFIG)
#   lib/pkgconfig/attograd.pc               pkg-config --cflags --libs attograd
#   bin/attograd-{copy-task,translate,lm}, share/attograd/numbers/
# and the CPack set-up of the .deb (cpack -G DEB in the build directory).
include(CMakePackageConfigHelpers)

# Headers that are implementation details stay out of the install: the
# tensor's storage (tensor_impl.h), the ops' kernels and the BLAS backend.
# No public header includes them (scripts/test.d/50-install.sh compiles each
# installed header alone to keep it so). Paths are relative to attograd/.
set(ATTOGRAD_PRIVATE_HEADERS autograd/tensor_impl.h autograd/ops/map_zip.h autograd/backend/blas.h
    autograd/backend/blas_kernel.h autograd/backend/cpu.h autograd/backend/small_gemm.h autograd/backend/vecmath_isa.h
    autograd/kernels/add.h autograd/kernels/rows.h)
set(ATTOGRAD_PUBLIC_HEADERS)
foreach(part ${ATTOGRAD_PARTS})
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/attograd ${PROJECT_SOURCE_DIR}/attograd/${part}/*.h)
  list(APPEND ATTOGRAD_PUBLIC_HEADERS ${headers})
endforeach()
list(REMOVE_ITEM ATTOGRAD_PUBLIC_HEADERS ${ATTOGRAD_PRIVATE_HEADERS})
list(SORT ATTOGRAD_PUBLIC_HEADERS)

set(ATTOGRAD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/attograd)
foreach(header ${ATTOGRAD_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES attograd/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attograd/${dir} COMPONENT dev)
endforeach()
install(FILES attograd/attograd.h ${ATTOGRAD_BUILD_INCLUDE}/attograd/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attograd COMPONENT dev)

set(ATTOGRAD_INSTALLED_LIBRARIES attograd_tensor attograd_autograd attograd_nn attograd_optim attograd_data attograd_dist
    attograd_attograd)
install(TARGETS ${ATTOGRAD_INSTALLED_LIBRARIES}
        EXPORT attogradTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT attogradTargets NAMESPACE attograd:: DESTINATION ${ATTOGRAD_CMAKE_DIR} COMPONENT dev)

# SameMinorVersion: 0.1.x satisfies find_package(attograd 0.1) but 0.2 does
# not, since before 1.0 a minor release may change the API (the soname has
# the minor version for the same reason).
configure_package_config_file(cmake/attogradConfig.cmake.in ${PROJECT_BINARY_DIR}/attogradConfig.cmake
                              INSTALL_DESTINATION ${ATTOGRAD_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attogradConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attogradConfig.cmake ${PROJECT_BINARY_DIR}/attogradConfigVersion.cmake
        DESTINATION ${ATTOGRAD_CMAKE_DIR} COMPONENT dev)

# attograd.pc. With static libraries the optional libraries the build used
# (SentencePiece, SLEEF, libxsmm), libdl and the thread library are needed by
# every link, so they are plain Requires/Libs; a shared build moves them to
# the .private fields. OpenBLAS is in neither: the library loads it at run
# time (cmake/openblas.cmake). libxsmm is spelled out as -lxsmm -lxsmmnoblas
# (cmake/small_gemm.cmake) rather than required: pkg-config would move
# Requires' -lxsmm after our -lxsmmnoblas, and the stubs must come after
# libxsmm to be linked.
set(attograd_pc_deps "")
if(ATTOGRAD_SENTENCEPIECE)
  string(APPEND attograd_pc_deps " sentencepiece")
endif()
if(ATTOGRAD_SLEEF)
  string(APPEND attograd_pc_deps " sleef")
endif()
string(STRIP "${attograd_pc_deps}" attograd_pc_deps)
set(attograd_pc_libs "-lrt -ldl -lm -pthread")
if(ATTOGRAD_XSMM)
  set(attograd_pc_libs "-lxsmm -lxsmmnoblas ${attograd_pc_libs}")
endif()
if(BUILD_SHARED_LIBS)
  set(ATTOGRAD_PC_REQUIRES "fmt nlohmann_json")
  set(ATTOGRAD_PC_REQUIRES_PRIVATE "${attograd_pc_deps}")
  set(ATTOGRAD_PC_LIBS_STATIC "")
  set(ATTOGRAD_PC_LIBS_PRIVATE "${attograd_pc_libs}")
else()
  string(STRIP "fmt nlohmann_json ${attograd_pc_deps}" ATTOGRAD_PC_REQUIRES)
  set(ATTOGRAD_PC_REQUIRES_PRIVATE "")
  set(ATTOGRAD_PC_LIBS_STATIC " ${attograd_pc_libs}")
  set(ATTOGRAD_PC_LIBS_PRIVATE "")
endif()
# The prefix is found relative to the .pc file, so the file stays right
# under `cmake --install --prefix P`, DESTDIR and the .deb.
file(RELATIVE_PATH ATTOGRAD_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" ATTOGRAD_PC_TO_PREFIX "${ATTOGRAD_PC_TO_PREFIX}")
configure_file(cmake/attograd.pc.in ${PROJECT_BINARY_DIR}/attograd.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/attograd.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The general programs (not the heads study, a research project run from the
# build tree), renamed so they cannot collide with another package's, and
# the corpus they default to (share/attograd/numbers, found from the
# program's own path). The .deb is made from a static build; with
# BUILD_SHARED_LIBS the programs' RUNPATH is $ORIGIN/../lib.
set(ATTOGRAD_INSTALLED_PROGRAMS copy_task translate lm)
foreach(program ${ATTOGRAD_INSTALLED_PROGRAMS})
  if(TARGET ${program})
    string(REPLACE "_" "-" installed ${program})
    install(PROGRAMS $<TARGET_FILE:${program}> DESTINATION ${CMAKE_INSTALL_BINDIR} RENAME attograd-${installed}
            COMPONENT programs)
    # install(PROGRAMS) is not stripped by `cmake --install --strip` or CPack's CPACK_STRIP_FILES; this is.
    if(CMAKE_STRIP)
      install(CODE "if(CMAKE_INSTALL_DO_STRIP)
          execute_process(COMMAND \"${CMAKE_STRIP}\"
                          \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/attograd-${installed}\")
        endif()" COMPONENT programs)
    endif()
  endif()
endforeach()
if(TARGET translate)
  install(DIRECTORY data/numbers DESTINATION ${CMAKE_INSTALL_DATADIR}/attograd COMPONENT programs)
endif()

# Everything the install rules above take from the build, and nothing else: a
# package build (scripts/test.d/60-deb.sh, configured with
# CMAKE_SKIP_INSTALL_ALL_DEPENDENCY so that installing does not build `all`)
# builds this target instead of every example.
add_custom_target(attograd_package)
add_dependencies(attograd_package ${ATTOGRAD_INSTALLED_LIBRARIES})
foreach(program ${ATTOGRAD_INSTALLED_PROGRAMS})
  if(TARGET ${program})
    add_dependencies(attograd_package ${program})
  endif()
endforeach()

include(cmake/package.cmake)
