// CPU kernels of the engine. Thin header: the SIMD bodies live in
// kernels-inl.h (Highway, compiled once per target) and are reached through one
// dynamic-dispatch point in kernels.cc; kernels_scalar.cc holds the plain scalar
// reference used by the scalar kernel path and by the per-op tests.
//
// Invariance contract (what makes the engine bitwise chunk- and batch-
// invariant): for a given path and dispatch target, the value of every output
// element depends only on the inputs that element reads and on the reduction
// length, never on how many rows are processed together, on where the row
// sits in the batch, on the [o_begin, o_end) split, on pointer alignment, or
// on the thread count. Elementwise kernels (activations, residual add, the
// normalize step of the norms) give each element the same bits wherever it
// sits in the array. docs/KERNELS.md says how each kernel keeps this and what
// the SIMD path's exp/tanh errors are.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kv_dtype.h"

namespace kvcheck::cpu {

enum class KernelPath : uint8_t { kScalar, kSimd };

// y[i][o] = sum_k x[i][k] * w[o][k] (+ bias[o]) for i < rows, o in [o_begin, o_end).
//   x: [rows][in], row stride `in`;  w: [out][in];  bias: [out] or nullptr;
//   y: [rows][out], row stride `out`.
// Threads may call it on disjoint [o_begin, o_end) ranges.
void matmul(KernelPath path, const float* x, size_t rows, const float* w, const float* bias,
            size_t in, size_t out, size_t o_begin, size_t o_end, float* y);

// Floats of scratch that attend() needs: one score row per query head, so the
// keys and values are read once for the whole group.
inline size_t attend_scratch_floats(size_t group, size_t n_keys) {
  return group * n_keys;
}

// Causal attention of `group` query heads that share one KV head, for one
// query at one absolute position, over cached keys 0..n_keys-1.
//   q: [group][dim];  k, v: [n_keys] rows of `dtype` stored by kv_store_row
//   for kv_stride >= dim elements (kv_row_bytes(dtype, kv_stride) apart; the
//   first dim are read);  scores: scratch [group][n_keys] floats (attend_scratch_floats);
//   out: [group][dim].
// scale is 1/sqrt(dim). Softmax subtracts the exact max; the key reduction
// runs over absolute key index 0..n_keys-1, the same order for every chunking,
// and head g's result is the same bits for any group size. n_keys == 0 gives
// zeros. A NaN anywhere in the keys or values read makes the output NaN.
void attend(KernelPath path, const float* q, size_t group, const void* k, const void* v,
            KvDtype dtype, size_t kv_stride, size_t n_keys, size_t dim, float scale, float* scores,
            float* out);

// attend() over paged storage: key j's row is row j % block_rows of block
// j / block_rows.  k_blocks, v_blocks: [ceil(n_keys / block_rows)] block
// starts, each [block_rows][dim] rows of `dtype` with row stride kv_stride.
// The same bits as attend() over the same rows laid out contiguously.
void attend_paged(KernelPath path, const float* q, size_t group, const void* const* k_blocks,
                  const void* const* v_blocks, size_t block_rows, KvDtype dtype, size_t kv_stride,
                  size_t n_keys, size_t dim, float scale, float* scores, float* out);

// attend() over a sliding-window layer's ring of ring_rows slots: key j's
// row is row (first_slot + j) % ring_rows of k / v (each [ring_rows] rows of
// `dtype`, row stride kv_stride). Keys are reduced in j order, so the bits
// are those of attend() over the same rows laid out contiguously; n_keys may
// exceed ring_rows (a faulty window reads slots twice), first_slot < ring_rows.
void attend_ring(KernelPath path, const float* q, size_t group, const void* k, const void* v,
                 size_t ring_rows, size_t first_slot, KvDtype dtype, size_t kv_stride,
                 size_t n_keys, size_t dim, float scale, float* scores, float* out);

// LayerNorm (biased variance, two-pass) and RMSNorm over one row of `width`.
//   x, y: [width];  gain, bias: [width] (bias may be nullptr). y may alias x.
void layer_norm(KernelPath path, const float* x, const float* gain, const float* bias, size_t width,
                float eps, float* y);
void rms_norm(KernelPath path, const float* x, const float* gain, size_t width, float eps,
              float* y);

// In place: x[i] = gelu_tanh(x[i]) for i < n.   x: [n]
void gelu_tanh(KernelPath path, float* x, size_t n);
// gate[i] = silu(gate[i]) * up[i] for i < n.   gate, up: [n]
void silu_mul(KernelPath path, float* gate, const float* up, size_t n);

// y[i] += x[i] for i < n (the residual add).   y, x: [n]
void add_inplace(KernelPath path, float* y, const float* x, size_t n);

// In place: x[i] = exp(x[i]) / tanh(x[i]) with the same elementwise function
// attend/silu_mul and gelu_tanh use on this path; exposed so the tests can
// measure its ulp error (docs/KERNELS.md) for the tolerance derivations.  x: [n]
void exp_inplace(KernelPath path, float* x, size_t n);
void tanh_inplace(KernelPath path, float* x, size_t n);

// Name of the Highway target the SIMD path dispatches to on this machine.
const char* simd_target_name();

// The plain scalar reference behind KernelPath::kScalar (kernels_scalar.cc).
// Engine code selects it through the KernelPath argument; the declarations are
// here only so the dispatch point can reach it.
namespace scalar {
void matmul(const float* x, size_t rows, const float* w, const float* bias, size_t in, size_t out,
            size_t o_begin, size_t o_end, float* y);
void attend(const float* q, size_t group, const void* k, const void* v, KvDtype dtype,
            size_t kv_stride, size_t n_keys, size_t dim, float scale, float* scores, float* out);
void attend_paged(const float* q, size_t group, const void* const* k_blocks,
                  const void* const* v_blocks, size_t block_rows, KvDtype dtype, size_t kv_stride,
                  size_t n_keys, size_t dim, float scale, float* scores, float* out);
void attend_ring(const float* q, size_t group, const void* k, const void* v, size_t ring_rows,
                 size_t first_slot, KvDtype dtype, size_t kv_stride, size_t n_keys, size_t dim,
                 float scale, float* scores, float* out);
void layer_norm(const float* x, const float* gain, const float* bias, size_t width, float eps,
                float* y);
void rms_norm(const float* x, const float* gain, size_t width, float eps, float* y);
void gelu_tanh(float* x, size_t n);
void silu_mul(float* gate, const float* up, size_t n);
void add_inplace(float* y, const float* x, size_t n);
void exp_inplace(float* x, size_t n);
void tanh_inplace(float* x, size_t n);
}  // namespace scalar

}  // namespace kvcheck::cpu
