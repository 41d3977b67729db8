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

const char* const kEigenGemmMarch = KVCHECK_BENCH_MARCH;

// What the compiler was allowed to use here, as far as both g++ and clang can
// query it at run time (kernels_bench.cpp's table has the same names). Not
// checked: F16C, LZCNT, MOVBE (on every CPU with AVX2) and extensions newer
// than the compilers' run-time lists, such as AVX512-FP16 and AMX, which a
// float GEMM has no use for.
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
#ifdef __SSE4A__
    "sse4a",
#endif
#ifdef __AES__
    "aes",
#endif
#ifdef __PCLMUL__
    "pclmul",
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
#ifdef __FMA4__
    "fma4",
#endif
#ifdef __XOP__
    "xop",
#endif
#ifdef __GFNI__
    "gfni",
#endif
#ifdef __VPCLMULQDQ__
    "vpclmulqdq",
#endif
#ifdef __AVX512ER__
    "avx512er",
#endif
#ifdef __AVX512PF__
    "avx512pf",
#endif
#ifdef __AVX5124VNNIW__
    "avx5124vnniw",
#endif
#ifdef __AVX5124FMAPS__
    "avx5124fmaps",
#endif
#ifdef __AVX512VP2INTERSECT__
    "avx512vp2intersect",
#endif
    nullptr};

}  // namespace kvcheck::bench
