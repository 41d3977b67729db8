# Harness throughput (cases/s per property, time to kill every fault) on the
# optimized CPU engine; docs/PERFORMANCE.md, "Harness throughput".
add_executable(harness_bench ${CMAKE_CURRENT_LIST_DIR}/harness_bench.cpp)
target_link_libraries(harness_bench PRIVATE kvcheck_rc kvcheck_backends benchmark::benchmark)
