# Engine benchmarks (GPT-2-small shape), with the dispatched roofline probes.
add_executable(engine_bench ${CMAKE_CURRENT_LIST_DIR}/engine_bench.cpp)
target_link_libraries(engine_bench PRIVATE kvcheck_cpu_engine kvcheck_cpu_engine_without_faults
                      kvcheck_bench_probes kvcheck_cpu_kernels benchmark::benchmark)
