// CPU kernels of the engine. Thin header: the SIMD bodies live in
// kernels-inl.h (Highway, compiled once per target) and are reached through one
// dynamic-dispatch point in kernels.cc; kernels_scalar.cc holds the plain scalar
// reference used by the scalar kernel path and by the per-op tests.
//
// Invariance contract (what makes the engine bitwise chunk- and batch-
// invariant): for a given path and dispatch target, the value of every output
// element depends only on the inputs that element reads and on the reduction
// length, never on how many rows are processed together, on where the row
// sits in the batch, or on the thread count.
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

// Causal attention of `group` query heads that share one KV head, for one
// query at one absolute position, over cached keys 0..n_keys-1.
//   q: [group][dim];  k, v: [n_keys][dim] rows of `dtype`, row stride `kv_stride`
//   elements;  scores: scratch [n_keys] floats;  out: [group][dim].
// scale is 1/sqrt(dim). Softmax subtracts the exact max; the key reduction
// runs over absolute key index 0..n_keys-1, the same order for every chunking.
void attend(KernelPath path, const float* q, size_t group, const void* k, const void* v,
            KvDtype dtype, size_t kv_stride, size_t n_keys, size_t dim, float scale,
            float* scores, float* out);

// LayerNorm (biased variance) and RMSNorm over one row of `width`.
//   x, y: [width];  gain, bias: [width] (bias may be nullptr).
void layer_norm(KernelPath path, const float* x, const float* gain, const float* bias,
                size_t width, float eps, float* y);
void rms_norm(KernelPath path, const float* x, const float* gain, size_t width, float eps,
              float* y);

// In place: x[i] = gelu_tanh(x[i]) for i < n.
void gelu_tanh(KernelPath path, float* x, size_t n);
// gate[i] = silu(gate[i]) * up[i] for i < n.
void silu_mul(KernelPath path, float* gate, const float* up, size_t n);

// y[i] += x[i] for i < n (the residual add).
void add_inplace(KernelPath path, float* y, const float* x, size_t n);

// Stores n floats into a KV slot of `dtype`, rounding to nearest even.
void kv_store(const float* src, KvDtype dtype, void* dst, size_t n);

// Name of the Highway target the SIMD path dispatches to on this machine.
const char* simd_target_name();

}  // namespace kvcheck::cpu
