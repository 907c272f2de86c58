# Test helpers. Labels say what a test needs (STYLE.md): unit, mpi, slurm, gpu, smoke.
include(GoogleTest)
find_package(GTest REQUIRED)

# The mpirun prefix for tests: root needs --allow-run-as-root; tests may run more ranks than
# cores (--oversubscribe).
set(DTUNE_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe)
execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_uid STREQUAL "0")
  list(APPEND DTUNE_MPIRUN --allow-run-as-root)
endif()

# The slow tests' measured times, as ctest's COST (ctest -j starts the longest first).
include(${PROJECT_SOURCE_DIR}/tests/costs.cmake)

# GoogleTest's main, ending without the static destructors (tests/gtest_main.cc says why).
add_library(dtune_gtest_main STATIC ${PROJECT_SOURCE_DIR}/tests/gtest_main.cc)
target_link_libraries(dtune_gtest_main PUBLIC GTest::gtest PRIVATE dtune_torch_cuda dtune_warnings)

# dtune_unit_test(NAME SOURCES... [LIBS ...]): one GoogleTest binary, each test a ctest entry.
function(dtune_unit_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest dtune_gtest_main dtune_warnings)
  # A GTEST_SKIP shows as Skipped, not Passed.
  gtest_discover_tests(${name} PROPERTIES LABELS unit SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
                       DISCOVERY_TIMEOUT 60)
endfunction()

# dtune_mpi_test(NAME NP COMMAND...): runs COMMAND under mpirun with NP ranks.
function(dtune_mpi_test name np)
  add_test(NAME ${name} COMMAND ${DTUNE_MPIRUN} -np ${np} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 600 PROCESSORS ${np})
  dtune_test_cost(${name})
endfunction()

# dtune_pytest(NAME FILE LABELS ... [ARGS ...]): a pytest file run by the project's Python against
# the built binaries, with the report package importable; ARGS go to pytest. Skips are printed with
# their reasons (-rs) and make the entry Skipped (exit 77, tests/conftest.py); under CI=true a skip
# of anything but a gpu test fails.
if(NOT DTUNE_PYTHON)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(DTUNE_PYTHON ${Python3_EXECUTABLE})
endif()
# PROCESSORS N: the ctest slots it takes (a test timing ranks that must not wait for cores).
function(dtune_pytest name file)
  cmake_parse_arguments(T "" "PROCESSORS" "LABELS;ARGS" ${ARGN})
  add_test(NAME ${name}
           COMMAND ${DTUNE_PYTHON} -m pytest -q -rs -p no:cacheprovider --rootdir=${PROJECT_SOURCE_DIR}/tests ${T_ARGS} ${file})
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT 900 SKIP_RETURN_CODE 77
    ENVIRONMENT "DTUNE_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};PYTHONPATH=${PROJECT_SOURCE_DIR}/report:${PROJECT_SOURCE_DIR}/tests:${PROJECT_SOURCE_DIR}/tests/models;DTUNE_MPIRUN=${MPIEXEC_EXECUTABLE}")
  if(T_PROCESSORS)
    set_tests_properties(${name} PROPERTIES PROCESSORS ${T_PROCESSORS})
  endif()
  dtune_test_cost(${name})
endfunction()
