# GPU benchmarks (label-free: ci/gpu runs the binary). Only with nvcc found;
# the binary prints a note and exits 0 where no device is present.
add_executable(cuda_bench ${CMAKE_CURRENT_LIST_DIR}/cuda_bench.cpp)
target_link_libraries(cuda_bench PRIVATE kvcheck_cuda_engine kvcheck_cpu_engine
                      benchmark::benchmark)
