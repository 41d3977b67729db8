// Eigen's GEMM for the comparison in kernels_bench. Eigen vectorizes at
// compile time only, so eigen_gemm.cpp alone is compiled with
// KVCHECK_BENCH_MARCH; this header keeps to raw pointers so no inline code
// compiled for that ISA is shared with (and picked by the linker for) the
// portable rest of the binary.
#pragma once

namespace kvcheck::bench {

// y[rows][out] = x[rows][in] * w[out][in]^T + bias[out], row-major, one thread.
void eigen_matmul(const float* x, long rows, const float* w, const float* bias, long in, long out,
                  float* y);

// KVCHECK_BENCH_MARCH as configured ("" for the compiler's default), for the
// benchmark's label: the comparison means little without Eigen's ISA.
extern const char* const kEigenGemmMarch;

// The instruction-set extensions eigen_gemm.cpp was compiled for, by their
// __builtin_cpu_supports names; null-terminated.
extern const char* const kEigenGemmIsa[];

}  // namespace kvcheck::bench
