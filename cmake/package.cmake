# CPack: `cpack -G DEB` in a configured and built directory makes
# attograd_<version>_<arch>.deb (headers, static libraries, the CMake package,
# attograd.pc, the programs and their corpus, installed under /usr). Build it
# with -DATTOGRAD_NATIVE=OFF so that the libraries and programs run on any
# CPU of the architecture, and with -DCMAKE_INSTALL_PREFIX=/usr so that the
# libraries go to Debian's multiarch directory /usr/lib/<triplet>
# (scripts/test.d/60-deb.sh does both).
set(CPACK_PACKAGE_NAME attograd)
set(CPACK_PACKAGE_VENDOR attograd)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "attograd maintainers <attograd@users.noreply.github.com>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES TRUE)  # the programs (static libraries are never stripped: they would lose their symbols)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# The -dev packages: a consumer compiles against their headers and links
# their libraries (the installed targets and attograd.pc require them); they
# pull in the runtime libraries the programs need (libfmt9). OpenBLAS is
# loaded at run time (cmake/openblas.cmake), which dpkg-shlibdeps cannot
# see, so its runtime package is named here.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libopenblas0, libfmt-dev, nlohmann-json3-dev")
# The optional libraries this build used (CMakeLists.txt's attograd_optional).
foreach(pair ATTOGRAD_SENTENCEPIECE:libsentencepiece-dev ATTOGRAD_SLEEF:libsleef-dev ATTOGRAD_XSMM:libxsmm-dev)
  string(REPLACE ":" ";" pair ${pair})
  list(GET pair 0 option)
  list(GET pair 1 package)
  if(${option})
    string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", ${package}")
  endif()
endforeach()
if(ATTOGRAD_MPI)  # attograd::dist links MPI (find_dependency(MPI) in attogradConfig.cmake)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libopenmpi-dev")
endif()
# With dpkg-shlibdeps (dpkg-dev) the programs' runtime libraries are added too.
find_program(ATTOGRAD_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(ATTOGRAD_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "cmake, pkg-config, g++ (>= 4:12)")
if(NOT CPACK_GENERATOR)
  set(CPACK_GENERATOR DEB)
endif()
include(CPack)
