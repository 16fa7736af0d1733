# Runs at install time (install(CODE) in cmake/install.cmake): copies each
# public header to include/attograd/<path>, with its own includes of other
# attograd headers given the attograd/ prefix ("nn/module.h" becomes
# "attograd/nn/module.h"), so that the installed tree needs only
# -I<prefix>/include and puts no bare autograd/, nn/, optim/ or data/ folder
# on a consumer's include path. The rewritten copies are staged in the build
# directory and installed with file(INSTALL), which honours DESTDIR and the
# install manifest.
list(JOIN ATTOGRAD_PARTS "|" parts)
if(IS_ABSOLUTE "${ATTOGRAD_INCLUDEDIR}")
  set(dest_root "${ATTOGRAD_INCLUDEDIR}/attograd")
else()
  set(dest_root "${CMAKE_INSTALL_PREFIX}/${ATTOGRAD_INCLUDEDIR}/attograd")
endif()
foreach(header ${ATTOGRAD_HEADERS})
  file(READ "${ATTOGRAD_SOURCE_DIR}/${header}" text)
  string(REGEX REPLACE "#include \"(${parts})/" "#include \"attograd/\\1/" text "${text}")
  set(staged "${ATTOGRAD_STAGE_DIR}/attograd/${header}")
  set(old "")
  if(EXISTS "${staged}")
    file(READ "${staged}" old)
  endif()
  if(NOT old STREQUAL text)  # an unchanged header keeps its time stamp
    file(WRITE "${staged}" "${text}")
  endif()
  get_filename_component(dir "${header}" DIRECTORY)
  file(INSTALL DESTINATION "${dest_root}/${dir}" TYPE FILE FILES "${staged}")
endforeach()
