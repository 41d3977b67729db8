// Compiled with -march=${KVCHECK_BENCH_MARCH} (bench/CMakeLists.txt); nothing
// here may run before the caller has checked kEigenGemmIsa against the CPU.
#include "bench/eigen_gemm.h"

#include <Eigen/Core>

namespace kvcheck::bench {

void eigen_matmul(const float* x_data, long rows, const float* w_data, const float* bias_data,
                  long in, long out, float* y_data) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RowMajor> x(x_data, rows, in), w(w_data, out, in);  // [rows][in], [out][in]
  Eigen::Map<const Eigen::RowVectorXf> bias(bias_data, out);           // [out]
  Eigen::Map<RowMajor> y(y_data, rows, out);                           // [rows][out]
  y.noalias() = x * w.transpose();
  y.rowwise() += bias;
}

// What the compiler was allowed to use here; the extensions that both g++ and
// clang can query at run time (others, e.g. F16C, come with these on every CPU).
const char* const kEigenGemmIsa[] = {
#ifdef __SSE3__
    "sse3",
#endif
#ifdef __SSSE3__
    "ssse3",
#endif
#ifdef __SSE4_1__
    "sse4.1",
#endif
#ifdef __SSE4_2__
    "sse4.2",
#endif
#ifdef __POPCNT__
    "popcnt",
#endif
#ifdef __AVX__
    "avx",
#endif
#ifdef __AVX2__
    "avx2",
#endif
#ifdef __FMA__
    "fma",
#endif
#ifdef __BMI__
    "bmi",
#endif
#ifdef __BMI2__
    "bmi2",
#endif
#ifdef __AVX512F__
    "avx512f",
#endif
#ifdef __AVX512CD__
    "avx512cd",
#endif
#ifdef __AVX512DQ__
    "avx512dq",
#endif
#ifdef __AVX512BW__
    "avx512bw",
#endif
#ifdef __AVX512VL__
    "avx512vl",
#endif
#ifdef __AVX512IFMA__
    "avx512ifma",
#endif
#ifdef __AVX512VBMI__
    "avx512vbmi",
#endif
#ifdef __AVX512VBMI2__
    "avx512vbmi2",
#endif
#ifdef __AVX512VNNI__
    "avx512vnni",
#endif
#ifdef __AVX512BITALG__
    "avx512bitalg",
#endif
#ifdef __AVX512VPOPCNTDQ__
    "avx512vpopcntdq",
#endif
#ifdef __AVX512BF16__
    "avx512bf16",
#endif
    nullptr};

}  // namespace kvcheck::bench
