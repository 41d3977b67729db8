# Harness throughput (cases/s per property, time to kill every fault) on the
# optimized CPU engine; docs/PERFORMANCE.md, "Harness throughput".
add_executable(harness_bench ${CMAKE_CURRENT_LIST_DIR}/harness_bench.cpp)
target_link_libraries(harness_bench PRIVATE kvcheck_rc kvcheck_backends kvcheck_bench_probes
                      benchmark::benchmark)
# P1 through the C plugin ABI loads the CPU engine plugin built with the
# tests; its engine symbols resolve from this binary.
set_target_properties(harness_bench PROPERTIES ENABLE_EXPORTS ON)
target_compile_definitions(harness_bench PRIVATE
  KVCHECK_CPU_PLUGIN="$<TARGET_FILE:kvcheck_test_cpu_plugin>"
  KVCHECK_SERVE="$<TARGET_FILE:kvcheck-serve>" KVCHECK_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(harness_bench kvcheck_test_cpu_plugin kvcheck-serve)
