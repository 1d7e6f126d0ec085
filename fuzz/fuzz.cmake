# libFuzzer harnesses for every loader (issue 14).  Included from the top-level CMakeLists.txt
# when AUTOSHARD_FUZZ=ON, before the modules are declared, so that the libraries the harnesses
# link are compiled by the same clang with coverage instrumentation and ASan/UBSan.  The same
# build directory (scripts/sanitize-configure.sh: build-asan) also builds and runs every unit
# test under the sanitizers; the Release build uses g++.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "AUTOSHARD_FUZZ=ON needs clang (-DCMAKE_CXX_COMPILER=clang++), got "
                      "${CMAKE_CXX_COMPILER_ID}")
endif()
# Every object gets libFuzzer's edge coverage, so that a harness is guided through whatever code
# its loader reaches; only the harness executables link libFuzzer's main.  The full
# fuzzer-no-link set, which adds comparison tracing (trace-cmp: how libFuzzer finds the keywords
# and magic numbers a parser compares against), is for the libraries that parse files and for
# the harnesses (AUTOSHARD_FUZZ_PARSERS below): in the solver's and planner's loops it is a call
# per comparison, and the unit tests built here ran twice as long with it everywhere.
add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                    -fno-sanitize-recover=undefined
                    -fsanitize-coverage=inline-8bit-counters,indirect-calls,pc-table)
# Debug keeps assertions; -O1 runs the tests several times faster than -O0 and line tables are
# all a sanitizer report needs (full debug info doubles the compile time).
set(CMAKE_CXX_FLAGS_DEBUG "-O1 -gline-tables-only")
add_link_options(-fsanitize=address,undefined)

set(AUTOSHARD_FUZZERS graph_json placements_json hardware_json iopddl state replay)
# The libraries holding the loaders the harnesses fuzz: graph JSON (ir), hardware JSON (mesh),
# placement strings (placement), IOPDDL problems (problem), plans, states and replays (io).
set(AUTOSHARD_FUZZ_PARSERS autoshard_ir autoshard_mesh autoshard_placement autoshard_problem
                           autoshard_io)
# Harness targets are created at the end of configuration (cmake_language DEFER), when every
# library target exists.
function(autoshard_add_fuzzers)
  foreach(name ${AUTOSHARD_FUZZERS})
    add_executable(${name}_fuzz ${CMAKE_SOURCE_DIR}/fuzz/${name}_fuzz.cc)
    target_include_directories(${name}_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/fuzz)
    target_compile_options(${name}_fuzz PRIVATE -fsanitize=fuzzer-no-link)
    target_link_options(${name}_fuzz PRIVATE -fsanitize=fuzzer)
    target_compile_definitions(${name}_fuzz PRIVATE AUTOSHARD_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  endforeach()
  target_link_libraries(graph_json_fuzz PRIVATE autoshard_ir)
  target_link_libraries(placements_json_fuzz PRIVATE autoshard_io)
  target_link_libraries(hardware_json_fuzz PRIVATE autoshard_mesh)
  target_link_libraries(iopddl_fuzz PRIVATE autoshard_problem)
  target_link_libraries(state_fuzz PRIVATE autoshard_io)
  target_link_libraries(replay_fuzz PRIVATE autoshard_io)
  foreach(lib ${AUTOSHARD_FUZZ_PARSERS})
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link)
  endforeach()
  add_custom_target(fuzzers)
  add_dependencies(fuzzers ${AUTOSHARD_FUZZERS_TARGETS})
endfunction()
set(AUTOSHARD_FUZZERS_TARGETS "")
foreach(name ${AUTOSHARD_FUZZERS})
  list(APPEND AUTOSHARD_FUZZERS_TARGETS ${name}_fuzz)
endforeach()
cmake_language(DEFER CALL autoshard_add_fuzzers)
