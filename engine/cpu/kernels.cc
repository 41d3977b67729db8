// The one dynamic-dispatch point of the CPU kernels. foreach_target.h
// re-includes this file once per Highway target, which compiles the SIMD
// bodies of kernels-inl.h for each; the public functions below (HWY_ONCE) pick
// the scalar reference or the best target this CPU supports.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/cpu/kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "engine/cpu/kernels-inl.h"
#include "hwy/highway.h"

#if HWY_ONCE
#include "engine/cpu/kernels.h"

namespace kvcheck::cpu {

HWY_EXPORT(MatmulSimd);
HWY_EXPORT(AttendSimd);
HWY_EXPORT(AttendPagedSimd);
HWY_EXPORT(AttendRingSimd);
HWY_EXPORT(LayerNormSimd);
HWY_EXPORT(RmsNormSimd);
HWY_EXPORT(GeluTanhSimd);
HWY_EXPORT(SiluMulSimd);
HWY_EXPORT(AddInplaceSimd);
HWY_EXPORT(ExpInplaceSimd);
HWY_EXPORT(TanhInplaceSimd);
HWY_EXPORT(SimdTargetName);

void matmul(KernelPath path, const float* x, size_t rows, const float* w, const float* bias,
            size_t in, size_t out, size_t o_begin, size_t o_end, float* y) {
  if (path == KernelPath::kScalar)
    return scalar::matmul(x, rows, w, bias, in, out, o_begin, o_end, y);
  HWY_DYNAMIC_DISPATCH(MatmulSimd)(x, rows, w, bias, in, out, o_begin, o_end, y);
}

void attend(KernelPath path, const float* q, size_t group, const void* k, const void* v,
            KvDtype dtype, size_t kv_stride, size_t n_keys, size_t dim, float scale, float* scores,
            float* out) {
  if (path == KernelPath::kScalar) {
    return scalar::attend(q, group, k, v, dtype, kv_stride, n_keys, dim, scale, scores, out);
  }
  HWY_DYNAMIC_DISPATCH(AttendSimd)
  (q, group, k, v, dtype, kv_stride, n_keys, dim, scale, scores, out);
}

void attend_paged(KernelPath path, const float* q, size_t group, const void* const* k_blocks,
                  const void* const* v_blocks, size_t block_rows, KvDtype dtype, size_t kv_stride,
                  size_t n_keys, size_t dim, float scale, float* scores, float* out) {
  if (path == KernelPath::kScalar) {
    return scalar::attend_paged(q, group, k_blocks, v_blocks, block_rows, dtype, kv_stride, n_keys,
                                dim, scale, scores, out);
  }
  HWY_DYNAMIC_DISPATCH(AttendPagedSimd)
  (q, group, k_blocks, v_blocks, block_rows, dtype, kv_stride, n_keys, dim, scale, scores, out);
}

void attend_ring(KernelPath path, const float* q, size_t group, const void* k, const void* v,
                 size_t ring_rows, size_t first_slot, KvDtype dtype, size_t kv_stride,
                 size_t n_keys, size_t dim, float scale, float* scores, float* out) {
  if (path == KernelPath::kScalar) {
    return scalar::attend_ring(q, group, k, v, ring_rows, first_slot, dtype, kv_stride, n_keys, dim,
                               scale, scores, out);
  }
  HWY_DYNAMIC_DISPATCH(AttendRingSimd)
  (q, group, k, v, ring_rows, first_slot, dtype, kv_stride, n_keys, dim, scale, scores, out);
}

void layer_norm(KernelPath path, const float* x, const float* gain, const float* bias, size_t width,
                float eps, float* y) {
  if (path == KernelPath::kScalar) return scalar::layer_norm(x, gain, bias, width, eps, y);
  HWY_DYNAMIC_DISPATCH(LayerNormSimd)(x, gain, bias, width, eps, y);
}

void rms_norm(KernelPath path, const float* x, const float* gain, size_t width, float eps,
              float* y) {
  if (path == KernelPath::kScalar) return scalar::rms_norm(x, gain, width, eps, y);
  HWY_DYNAMIC_DISPATCH(RmsNormSimd)(x, gain, width, eps, y);
}

void gelu_tanh(KernelPath path, float* x, size_t n) {
  if (path == KernelPath::kScalar) return scalar::gelu_tanh(x, n);
  HWY_DYNAMIC_DISPATCH(GeluTanhSimd)(x, n);
}

void silu_mul(KernelPath path, float* gate, const float* up, size_t n) {
  if (path == KernelPath::kScalar) return scalar::silu_mul(gate, up, n);
  HWY_DYNAMIC_DISPATCH(SiluMulSimd)(gate, up, n);
}

void add_inplace(KernelPath path, float* y, const float* x, size_t n) {
  if (path == KernelPath::kScalar) return scalar::add_inplace(y, x, n);
  HWY_DYNAMIC_DISPATCH(AddInplaceSimd)(y, x, n);
}

void exp_inplace(KernelPath path, float* x, size_t n) {
  if (path == KernelPath::kScalar) return scalar::exp_inplace(x, n);
  HWY_DYNAMIC_DISPATCH(ExpInplaceSimd)(x, n);
}

void tanh_inplace(KernelPath path, float* x, size_t n) {
  if (path == KernelPath::kScalar) return scalar::tanh_inplace(x, n);
  HWY_DYNAMIC_DISPATCH(TanhInplaceSimd)(x, n);
}

const char* simd_target_name() {
  return HWY_DYNAMIC_DISPATCH(SimdTargetName)();
}

}  // namespace kvcheck::cpu
#endif  // HWY_ONCE
