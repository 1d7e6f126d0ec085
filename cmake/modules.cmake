# autoshard_module(NAME DEPS ...): a static library from src/NAME/*.cc and, when src/NAME has
# *_test.cc files, a GoogleTest binary NAME_test registered with CTest.
# Every module gets `src/` on its include path so headers are included as "NAME/file.h".
function(autoshard_module name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${name}/*.cc)
  set(tests ${srcs})
  list(FILTER srcs EXCLUDE REGEX "_test\\.cc$")
  list(FILTER tests INCLUDE REGEX "_test\\.cc$")
  if(srcs)
    add_library(autoshard_${name} STATIC ${srcs})
    target_include_directories(autoshard_${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(autoshard_${name} PUBLIC ${ARG_DEPS})
  else()
    add_library(autoshard_${name} INTERFACE)
    target_include_directories(autoshard_${name} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(autoshard_${name} INTERFACE ${ARG_DEPS})
  endif()
  if(tests)
    add_executable(${name}_test ${tests})
    if(NOT AUTOSHARD_SANITIZE AND NOT AUTOSHARD_FUZZ)
      # The optimized build compiles test drivers at -O1: their code is setup and assertions
      # around calls into the libraries, which keep -O3, and a clean build compiles them about
      # twice as fast (planner_test's batch: 22 s at -O3, 12 s at -O1; its run 21 s either way).
      # Not under the sanitizers, whose -O1 is already the least that keeps the tests' own
      # loops fast (-O0 there: solver_test 27 -> 43 s of CPU).
      target_compile_options(${name}_test PRIVATE -O1)
    endif()
    target_link_libraries(${name}_test PRIVATE autoshard_${name} GTest::gtest GTest::gtest_main GTest::gmock)
    target_compile_definitions(${name}_test PRIVATE
      AUTOSHARD_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
      AUTOSHARD_SHARED_DIR="${CMAKE_SOURCE_DIR}/../shared")
    # Test suites named *Large (whole models, multi-second solves) run in the Release pass only:
    # scripts/test.sh sets GTEST_FILTER=-*Large.* for the sanitizer pass.
    add_test(NAME ${name}_test COMMAND ${name}_test)
    set_tests_properties(${name}_test PROPERTIES ENVIRONMENT "AUTOSHARD_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  endif()
endfunction()
