include(GoogleTest)

# kvcheck_gtest(NAME LABEL label SOURCES ... LIBS ... [TIMEOUT s])
# One GoogleTest binary, registered with ctest test by test under a label.
function(kvcheck_gtest name)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name}
    PROPERTIES LABELS ${ARG_LABEL} TIMEOUT ${ARG_TIMEOUT}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    DISCOVERY_TIMEOUT 60)
endfunction()

# kvcheck_unset_shard_variables(): at the end of a tests/ folder whose tests
# run `kvcheck campaign`. The campaign reads the shard conventions from the
# environment (tools/shard.h); a test runner that shards (GoogleTest's
# variables), or a Kubernetes or Slurm job running this suite, must not turn
# the tests' campaigns into shards, so every test of the folder registered
# with add_test runs without them.
function(kvcheck_unset_shard_variables)
  get_property(tests DIRECTORY PROPERTY TESTS)
  set(unset)
  foreach(variable GTEST_SHARD_INDEX GTEST_TOTAL_SHARDS JOB_COMPLETION_INDEX KVCHECK_SHARD_COUNT
                   SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_MIN
                   SLURM_ARRAY_TASK_MAX SLURM_ARRAY_TASK_STEP)
    list(APPEND unset "${variable}=unset:")
  endforeach()
  if(tests)
    set_property(TEST ${tests} APPEND PROPERTY ENVIRONMENT_MODIFICATION ${unset})
  endif()
endfunction()
