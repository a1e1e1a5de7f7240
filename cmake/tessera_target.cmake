# Warnings and CPU flags for tessera's own targets only (never for dependencies).
function(tessera_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
  if(TESSERA_NATIVE)
    target_compile_options(${target} PRIVATE -march=native)
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
