# Warnings and CPU flags for tessera's own targets only (never for dependencies).
function(tessera_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
  if(TESSERA_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
  if(TESSERA_FUZZ)
    # Coverage for libFuzzer and the sanitizers in every tessera library, so a fuzz target sees
    # the code it drives; only the fuzz executables link libFuzzer's main (tests/fuzz).
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                                             -g -fno-omit-frame-pointer)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()

# tessera_library(name SOURCES ... DEPENDS ...): one library per layer folder, aliased tessera::name.
function(tessera_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  add_library(tessera_${name} ${ARG_SOURCES})
  add_library(tessera::${name} ALIAS tessera_${name})
  target_include_directories(tessera_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(tessera_${name} PUBLIC ${ARG_DEPENDS} PRIVATE ${ARG_PRIVATE_DEPENDS})
  tessera_target_options(tessera_${name})
endfunction()
