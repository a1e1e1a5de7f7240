# Warnings and CPU flags for tessera's own targets only (never for dependencies).
function(tessera_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter -Werror=switch)
  if(TESSERA_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
  if(TESSERA_FUZZ AND TESSERA_SANITIZE)
    # The sanitizers are on for every target already (TESSERA_SANITIZE): add libFuzzer's coverage,
    # so one build holds the sanitized tests and the fuzz targets (scripts/test.sh).
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
  elseif(TESSERA_FUZZ)
    # Coverage for libFuzzer and the sanitizers in every tessera library, so a fuzz target sees
    # the code it drives; only the fuzz executables link libFuzzer's main (tests/fuzz).
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                                             -g -fno-omit-frame-pointer)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()

# tessera_unity_build(target): with TESSERA_UNITY_BUILD (the default), a library's sources compile
# in batches of up to 8 files (CMake's unity build), each batch one compiler run: the headers that
# every file of a layer includes (the standard library, MPI, HDF5, tessera's own) are parsed once a
# batch instead of once a file. A file with source properties of its own (kernels.cpp's and
# bfloat16.cpp's flags, version.cpp's definitions) still compiles alone; so do the test programs
# and apps, one file each.
function(tessera_unity_build target)
  if(TESSERA_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()

# tessera_library(name SOURCES ... DEPENDS ...): one library per layer folder, aliased tessera::name.
# Installed with its headers under include/tessera/<name>/ (so "core/tensor.h" resolves both in
# the tree and in an install) and exported as tessera::<name> in the tessera CMake package.
function(tessera_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  add_library(tessera_${name} ${ARG_SOURCES})
  add_library(tessera::${name} ALIAS tessera_${name})
  set_target_properties(tessera_${name} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(tessera_${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/tessera>)
  target_link_libraries(tessera_${name} PUBLIC ${ARG_DEPENDS} PRIVATE ${ARG_PRIVATE_DEPENDS})
  # The headers are C++20: a consumer compiles them so without setting a standard of its own.
  target_compile_features(tessera_${name} PUBLIC cxx_std_20)
  tessera_target_options(tessera_${name})
  tessera_unity_build(tessera_${name})
  install(TARGETS tessera_${name} EXPORT tesseraTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera/${name}
          FILES_MATCHING PATTERN "*.h")
endfunction()
