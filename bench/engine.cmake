# Engine benchmarks (GPT-2-small shape); probes compiled for the host.
add_executable(engine_bench ${CMAKE_CURRENT_LIST_DIR}/engine_bench.cpp)
target_link_libraries(engine_bench PRIVATE kvcheck_cpu_engine kvcheck_cpu_engine_without_faults
                      hwy::hwy benchmark::benchmark)
target_compile_options(engine_bench PRIVATE -march=native)
