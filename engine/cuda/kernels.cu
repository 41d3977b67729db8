// Kernels of the CUDA engine. Compiled with --fmad=false: every multiply-add
// is exactly the operation the source names (fmaf where a fused one is
// meant), so inlining or a different tile shape can never change a result.
// The invariance argument for each kernel is in docs/CUDA.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/cuda/device.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/reduce.cuh"
#include "engine/engine.h"

namespace kvcheck::cuda {
namespace {

int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// ---- KV element access -------------------------------------------------

__device__ __forceinline__ float load_kv(const void* base, KvDtype dtype, size_t index) {
  switch (dtype) {
    case KvDtype::kF32:
      return static_cast<const float*>(base)[index];
    case KvDtype::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    case KvDtype::kF16:
      return __half2float(static_cast<const __half*>(base)[index]);
    case KvDtype::kQ8_0:  // refused by make_cuda_engine (not in its traits)
    case KvDtype::kQ4_0:
    case KvDtype::kQ5_0:
    case KvDtype::kQ5_1:
      break;
  }
  return 0.0f;
}

// Round to nearest even, like kv_store on the CPU.
__device__ __forceinline__ void store_kv(void* base, KvDtype dtype, size_t index, float value) {
  switch (dtype) {
    case KvDtype::kF32:
      static_cast<float*>(base)[index] = value;
      return;
    case KvDtype::kBF16:
      static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(value);
      return;
    case KvDtype::kF16:
      static_cast<__half*>(base)[index] = __float2half_rn(value);
      return;
    case KvDtype::kQ8_0:  // refused by make_cuda_engine (not in its traits)
    case KvDtype::kQ4_0:
    case KvDtype::kQ5_0:
    case KvDtype::kQ5_1:
      return;
  }
}

// ---- embedding -----------------------------------------------------------

constexpr int kRowThreads = 256;

__global__ void __launch_bounds__(kRowThreads)
    embed_kernel(const int32_t* tokens, const TokenSlot* plan, const float* tok_embedding,
                 const float* pos_embedding, int E, float* x) {
  const size_t t = blockIdx.x;
  const float* token_row = tok_embedding + size_t(tokens[t]) * E;
  const float* position_row =
      pos_embedding != nullptr ? pos_embedding + size_t(plan[t].position) * E : nullptr;
  float* out = x + t * E;
  for (int e = threadIdx.x; e < E; e += kRowThreads) {
    float value = token_row[e];
    if (position_row != nullptr) value = value + position_row[e];
    out[e] = value;
  }
}

// ---- norms ----------------------------------------------------------------
// One block per row. Each thread sums elements e = tid, tid + 256, ... in
// order, then block_sum's fixed tree: the order depends only on E.

__global__ void __launch_bounds__(kRowThreads)
    layer_norm_kernel(const float* x, const float* gain, const float* bias, int E, float eps,
                      float* y) {
  __shared__ float scratch[32];
  const float* in = x + size_t(blockIdx.x) * E;
  float* out = y + size_t(blockIdx.x) * E;
  float partial = 0.0f;
  for (int e = threadIdx.x; e < E; e += kRowThreads) partial = partial + in[e];
  const float mean = block_sum<kRowThreads>(partial, scratch) / static_cast<float>(E);
  partial = 0.0f;
  for (int e = threadIdx.x; e < E; e += kRowThreads) {
    const float centered = in[e] - mean;
    partial = partial + centered * centered;
  }
  const float sum_sq = block_sum<kRowThreads>(partial, scratch);
  const float inv_std = 1.0f / sqrtf(sum_sq / static_cast<float>(E) + eps);
  for (int e = threadIdx.x; e < E; e += kRowThreads) {
    float value = (in[e] - mean) * inv_std * gain[e];
    if (bias != nullptr) value = value + bias[e];
    out[e] = value;
  }
}

__global__ void __launch_bounds__(kRowThreads)
    rms_norm_kernel(const float* x, const float* gain, int E, float eps, float* y) {
  __shared__ float scratch[32];
  const float* in = x + size_t(blockIdx.x) * E;
  float* out = y + size_t(blockIdx.x) * E;
  float partial = 0.0f;
  for (int e = threadIdx.x; e < E; e += kRowThreads) partial = partial + in[e] * in[e];
  const float sum_sq = block_sum<kRowThreads>(partial, scratch);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(E) + eps);
  for (int e = threadIdx.x; e < E; e += kRowThreads) out[e] = in[e] * inv_rms * gain[e];
}

// ---- matmul -----------------------------------------------------------------
// y[i][o] = sum_k x[i][k] w[o][k] + b[o], reduction order fixed by `in` alone:
// k is cut into segments of kMatmulSegmentK anchored at k = 0; segment s of
// element (i, o) is one fmaf chain over its k in increasing order; the
// segments' partials are then added in segment order, then the bias. Tiles
// (rows per block, outputs per block) only decide which threads run which
// chains side by side, so every row count and tile choice gives the same
// bits.

constexpr int kMatmulSegmentK = 128;
constexpr int kMatmulTileK = 32;
constexpr int kMatmulTileOut = 64;  // each thread: outputs lane and lane + 32
constexpr int kMatmulThreads = 256;
constexpr int kMatmulRowGroups = kMatmulThreads / kWarpSize;  // 8
// Rows per pass never drop below this, so the scratch sizing can promise it.
constexpr int kMatmulMinPassRows = 64;

int matmul_segments(int in) {
  return ceil_div(in, kMatmulSegmentK);
}

template <int kRowsPerThread>
__global__ void __launch_bounds__(kMatmulThreads)
    matmul_kernel(const float* x, int rows, const float* w, const float* bias, int in, int out,
                  float* partial, float* y) {
  constexpr int kTileRows = kRowsPerThread * kMatmulRowGroups;
  // Odd row strides keep the transposed tile stores free of bank conflicts.
  __shared__ float x_tile[kMatmulTileK][kTileRows + 1];       // [k][row]
  __shared__ float w_tile[kMatmulTileK][kMatmulTileOut + 1];  // [k][output]
  const int lane = threadIdx.x % kWarpSize, row_group = threadIdx.x / kWarpSize;
  const int out_base = blockIdx.x * kMatmulTileOut;
  const int row_base = blockIdx.y * kTileRows;
  const int segment = blockIdx.z;
  const int k_begin = segment * kMatmulSegmentK;
  const int k_end = min(in, k_begin + kMatmulSegmentK);

  float acc[kRowsPerThread][2];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) acc[i][0] = acc[i][1] = 0.0f;

  for (int k0 = k_begin; k0 < k_end; k0 += kMatmulTileK) {
    const int k_count = min(kMatmulTileK, k_end - k0);
    // Consecutive threads read consecutive k of one row: coalesced.
    for (int idx = threadIdx.x; idx < kMatmulTileOut * kMatmulTileK; idx += kMatmulThreads) {
      const int o = idx / kMatmulTileK, kk = idx % kMatmulTileK;
      const int global_o = out_base + o;
      w_tile[kk][o] = (global_o < out && kk < k_count) ? w[size_t(global_o) * in + k0 + kk] : 0.0f;
    }
    for (int idx = threadIdx.x; idx < kTileRows * kMatmulTileK; idx += kMatmulThreads) {
      const int m = idx / kMatmulTileK, kk = idx % kMatmulTileK;
      const int global_m = row_base + m;
      x_tile[kk][m] = (global_m < rows && kk < k_count) ? x[size_t(global_m) * in + k0 + kk] : 0.0f;
    }
    __syncthreads();
    // Only the k_count real terms: no padding term ever enters a chain.
    for (int kk = 0; kk < k_count; ++kk) {
      const float w0 = w_tile[kk][lane], w1 = w_tile[kk][lane + kWarpSize];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const float a = x_tile[kk][row_group * kRowsPerThread + i];
        acc[i][0] = fmaf(a, w0, acc[i][0]);
        acc[i][1] = fmaf(a, w1, acc[i][1]);
      }
    }
    __syncthreads();
  }

  const bool single_segment = gridDim.z == 1;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int m = row_base + row_group * kRowsPerThread + i;
    if (m >= rows) continue;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int o = out_base + lane + j * kWarpSize;
      if (o >= out) continue;
      if (single_segment) {
        // The same two roundings the reduce kernel does for one segment.
        y[size_t(m) * out + o] = bias != nullptr ? acc[i][j] + bias[o] : acc[i][j];
      } else {
        partial[(size_t(segment) * rows + m) * out + o] = acc[i][j];
      }
    }
  }
}

// partial: [segments][rows][out] -> y[rows][out], segments added in order.
__global__ void matmul_reduce_kernel(const float* partial, int segments, int rows, int out,
                                     const float* bias, float* y) {
  const size_t count = size_t(rows) * out;
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= count) return;
  float sum = partial[idx];
  for (int s = 1; s < segments; ++s) sum = sum + partial[size_t(s) * count + idx];
  if (bias != nullptr) sum = sum + bias[idx % size_t(out)];
  y[idx] = sum;
}

// ---- RoPE and the KV store -------------------------------------------------

// Rotate-half RoPE of pair (i, i + half) at `position`; the angle in double
// as on the CPU, so the only float roundings are the rotation's own.
__device__ __forceinline__ void rotate_pair(float& x1, float& x2, int position, double inv_freq) {
  double s, c;
  sincos(static_cast<double>(position) * inv_freq, &s, &c);
  const float cf = static_cast<float>(c), sf = static_cast<float>(s);
  const float a = x1, b = x2;
  x1 = a * cf - b * sf;
  x2 = b * cf + a * sf;
}

__global__ void __launch_bounds__(kRowThreads)
    rope_and_store_kernel(float* qkv, const TokenSlot* plan, int n, int H, const double* inv_freq,
                          KvCacheView cache, int layer, bool kv_swapped, int tokens_per_block) {
  const int D = cache.head_dim, KVH = cache.n_kv_heads, half = D / 2;
  const size_t Q = size_t(H) * D, KV = size_t(KVH) * D, stride = Q + 2 * KV;
  const int first = blockIdx.x * tokens_per_block;
  const int last = min(n, first + tokens_per_block);
  // Tokens in order; a thread owns the same (head, dim) of every token, so
  // two tokens stored to one slot (only under a fault) land in token order.
  for (int t = first; t < last; ++t) {
    const TokenSlot p = plan[t];
    float* q = qkv + size_t(t) * stride;
    float* k = q + Q;
    const float* v = k + KV;
    if (inv_freq != nullptr) {
      for (int idx = threadIdx.x; idx < (H + KVH) * half; idx += kRowThreads) {
        const int head = idx / half, i = idx % half;
        float* base = head < H ? q + size_t(head) * D : k + size_t(head - H) * D;
        rotate_pair(base[i], base[i + half], p.position, inv_freq[i]);
      }
      __syncthreads();  // the store below reads pairs other threads rotated
    }
    for (int idx = threadIdx.x; idx < int(KV); idx += kRowThreads) {
      const int g = idx / D, d = idx % D;
      const size_t at = cache.offset(layer, p.row, g, p.slot) + d;
      const float key = k[idx], value = v[idx];
      store_kv(cache.k, cache.dtype, at, kv_swapped ? value : key);
      store_kv(cache.v, cache.dtype, at, kv_swapped ? key : value);
    }
    __syncthreads();  // the next token's rotation may not overtake this token's reads
  }
}

__global__ void rope_cached_keys_kernel(KvCacheView cache, int layer, int row, int slot_begin,
                                        int position_offset, const double* inv_freq) {
  const int slot = slot_begin + int(blockIdx.x), g = blockIdx.y, half = cache.head_dim / 2;
  const size_t at = cache.offset(layer, row, g, slot);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float x1 = load_kv(cache.k, cache.dtype, at + i);
    float x2 = load_kv(cache.k, cache.dtype, at + i + half);
    rotate_pair(x1, x2, slot + position_offset, inv_freq[i]);
    store_kv(cache.k, cache.dtype, at + i, x1);
    store_kv(cache.k, cache.dtype, at + i + half, x2);
  }
}

// ---- attention ---------------------------------------------------------------
// Per query (token t, head h): the keys 0..n_keys-1 are cut into splits of
// kAttentionSplitKeys anchored at slot 0. Split s computes, in a fixed order,
// its scores (one fmaf chain over d per key, then * scale), its max m_s, its
// sum l_s = sum_j exp(s_j - m_s) (per-lane strided chains + warp_sum) and
// o_s[d] = sum_j exp(s_j - m_s) v_j[d] (one fmaf chain over j in order).
// The combine takes M = max m_s, w_s = exp(m_s - M), L = sum_s l_s w_s and
// out[d] = (sum_s fmaf chain o_s[d] w_s) / L, s in order. Nothing depends on
// the tokens beside it, its chunk, or the grid.

constexpr int kAttentionThreads = 128;
constexpr int kAttentionKeyTile = 32;
constexpr int kAttentionHeadsPerBlock = 8;
constexpr int kAttentionWarps = kAttentionThreads / kWarpSize;
constexpr int kAttentionAccumulators =
    kAttentionHeadsPerBlock * kMaxAttentionHeadDim / kAttentionThreads;  // 16

int attention_splits(int max_keys) {
  return ceil_div(max_keys, kAttentionSplitKeys);
}

// Shared floats: q [heads][D], key/value tile [32][D|1], probabilities [heads][split].
size_t attention_shared_bytes(int D) {
  return sizeof(float) *
         (size_t(kAttentionHeadsPerBlock) * D + size_t(kAttentionKeyTile) * (D | 1) +
          size_t(kAttentionHeadsPerBlock) * kAttentionSplitKeys);
}

// Element index of key `key`'s slot for one token and KV head: slot `key`
// of the token's row, or through its block table when paged. Only where a
// key lies depends on the storage mode; the arithmetic over the keys is the
// same, so paged and contiguous storage give the same bits.
__device__ __forceinline__ size_t key_offset(const AttentionArgs& a, const TokenSlot& slot,
                                             int kv_head, int key) {
  if (a.blocks == nullptr) return a.cache.offset(a.layer, slot.row, kv_head, key);
  const int unit = a.blocks[size_t(slot.table) * size_t(a.blocks_stride) + key / a.block_size];
  return a.cache.offset(a.layer, unit, kv_head, key % a.block_size);
}

__global__ void __launch_bounds__(kAttentionThreads)
    attention_split_kernel(AttentionArgs a, int head_blocks, int max_splits) {
  const int t = blockIdx.x;
  const int kv_head = blockIdx.y / head_blocks, head_block = blockIdx.y % head_blocks;
  const int split = blockIdx.z;
  const TokenSlot slot = a.plan[t];
  const int key_begin = split * kAttentionSplitKeys;
  if (key_begin >= slot.n_keys) return;  // the same for the whole block
  const int key_count = min(kAttentionSplitKeys, slot.n_keys - key_begin);
  const int D = a.cache.head_dim, KVH = a.cache.n_kv_heads, group = a.n_heads / KVH;
  const int first = head_block * kAttentionHeadsPerBlock;
  const int heads = min(kAttentionHeadsPerBlock, group - first);
  const int tile_stride = D | 1;  // odd: a thread per key reads its row conflict-free

  extern __shared__ float shared[];
  float* q_tile = shared;                                    // [heads][D]
  float* kv_tile = q_tile + kAttentionHeadsPerBlock * D;     // [32][D|1]
  float* probs = kv_tile + kAttentionKeyTile * tile_stride;  // [heads][split keys]

  // Query heads of this block, by index: contiguous groups share a KV head
  // (repeat_interleave); the tiled fault reads h % KVH instead.
  const auto query_head = [&](int i) {
    const int r = first + i;
    return a.tiled_kv_heads ? kv_head + r * KVH : kv_head * group + r;
  };
  for (int idx = threadIdx.x; idx < heads * D; idx += kAttentionThreads) {
    const int i = idx / D, d = idx % D;
    q_tile[idx] = a.qkv[size_t(t) * a.qkv_stride + size_t(query_head(i)) * D + d];
  }

  // Key j of this token and KV head: contiguous, one stream per split;
  // paged, one stream per block.
  for (int tile = 0; tile < key_count; tile += kAttentionKeyTile) {
    const int tile_keys = min(kAttentionKeyTile, key_count - tile);
    __syncthreads();
    for (int idx = threadIdx.x; idx < tile_keys * D; idx += kAttentionThreads) {
      const int key = key_begin + tile + idx / D;
      kv_tile[(idx / D) * tile_stride + idx % D] =
          load_kv(a.cache.k, a.cache.dtype, key_offset(a, slot, kv_head, key) + idx % D);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < heads * kAttentionKeyTile; idx += kAttentionThreads) {
      const int i = idx / kAttentionKeyTile, j = idx % kAttentionKeyTile;
      if (j >= tile_keys) continue;
      const float* q = q_tile + i * D;
      const float* key = kv_tile + j * tile_stride;
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot = fmaf(q[d], key[d], dot);
      probs[i * kAttentionSplitKeys + tile + j] = dot * a.scale;
    }
  }
  __syncthreads();

  const int n_heads = a.n_heads;
  float* partial_o = a.partial;
  float* partial_ml = a.partial + size_t(gridDim.x) * n_heads * max_splits * D;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int i = warp; i < heads; i += kAttentionWarps) {
    float* p = probs + i * kAttentionSplitKeys;
    float m = -INFINITY;
    for (int j = lane; j < key_count; j += kWarpSize) m = fmaxf(m, p[j]);
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j < key_count; j += kWarpSize) {
      const float e = expf(p[j] - m);
      p[j] = e;
      l = l + e;
    }
    l = warp_sum(l);
    if (lane == 0) {
      const size_t at = (size_t(t) * n_heads + query_head(i)) * max_splits + split;
      partial_ml[2 * at] = m;
      partial_ml[2 * at + 1] = l;
    }
  }

  float acc[kAttentionAccumulators];
#pragma unroll
  for (int r = 0; r < kAttentionAccumulators; ++r) acc[r] = 0.0f;
  for (int tile = 0; tile < key_count; tile += kAttentionKeyTile) {
    const int tile_keys = min(kAttentionKeyTile, key_count - tile);
    __syncthreads();  // probabilities written; the previous tile consumed
    for (int idx = threadIdx.x; idx < tile_keys * D; idx += kAttentionThreads) {
      const int key = key_begin + tile + idx / D;
      kv_tile[(idx / D) * tile_stride + idx % D] =
          load_kv(a.cache.v, a.cache.dtype, key_offset(a, slot, kv_head, key) + idx % D);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kAttentionAccumulators; ++r) {
      const int idx = threadIdx.x + r * kAttentionThreads;
      if (idx >= heads * D) continue;
      const int i = idx / D, d = idx % D;
      const float* p = probs + i * kAttentionSplitKeys + tile;
      float sum = acc[r];
      for (int j = 0; j < tile_keys; ++j) sum = fmaf(p[j], kv_tile[j * tile_stride + d], sum);
      acc[r] = sum;
    }
  }
#pragma unroll
  for (int r = 0; r < kAttentionAccumulators; ++r) {
    const int idx = threadIdx.x + r * kAttentionThreads;
    if (idx >= heads * D) continue;
    const int i = idx / D, d = idx % D;
    partial_o[((size_t(t) * n_heads + query_head(i)) * max_splits + split) * D + d] = acc[r];
  }
}

constexpr int kCombineThreads = 64;

__global__ void __launch_bounds__(kCombineThreads)
    attention_combine_kernel(AttentionArgs a, int max_splits) {
  const int t = blockIdx.x, h = blockIdx.y, D = a.cache.head_dim, n_heads = a.n_heads;
  const int splits = (a.plan[t].n_keys + kAttentionSplitKeys - 1) / kAttentionSplitKeys;
  float* out = a.out + (size_t(t) * n_heads + h) * D;
  if (splits == 0) {
    for (int d = threadIdx.x; d < D; d += kCombineThreads) out[d] = 0.0f;
    return;
  }
  extern __shared__ float weights[];  // [splits] exp(m_s - M)
  const size_t first = (size_t(t) * n_heads + h) * max_splits;
  const float* partial_o = a.partial + first * D;
  const float* partial_ml = a.partial + size_t(gridDim.x) * n_heads * max_splits * D + 2 * first;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, partial_ml[2 * s]);
  for (int s = threadIdx.x; s < splits; s += kCombineThreads) {
    weights[s] = expf(partial_ml[2 * s] - m);
  }
  __syncthreads();
  float l = 0.0f;
  for (int s = 0; s < splits; ++s) l = l + partial_ml[2 * s + 1] * weights[s];
  for (int d = threadIdx.x; d < D; d += kCombineThreads) {
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s) sum = fmaf(partial_o[size_t(s) * D + d], weights[s], sum);
    out[d] = sum / l;
  }
}

// ---- elementwise ---------------------------------------------------------------

constexpr int kElementThreads = 256;
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__global__ void add_kernel(float* y, const float* x, size_t count) {
  const size_t i = size_t(blockIdx.x) * kElementThreads + threadIdx.x;
  if (i < count) y[i] = y[i] + x[i];
}

__global__ void gelu_tanh_kernel(float* x, size_t count) {
  const size_t i = size_t(blockIdx.x) * kElementThreads + threadIdx.x;
  if (i >= count) return;
  const float v = x[i];
  const float inner = (v * v * v * kGeluCubic + v) * kGeluSqrt2OverPi;
  x[i] = (tanhf(inner) + 1.0f) * v * 0.5f;
}

__global__ void silu_mul_kernel(float* gate, const float* up, size_t count) {
  const size_t i = size_t(blockIdx.x) * kElementThreads + threadIdx.x;
  if (i >= count) return;
  const float g = gate[i];
  gate[i] = g / (expf(-g) + 1.0f) * up[i];
}

unsigned element_blocks(size_t count) {
  return static_cast<unsigned>((count + kElementThreads - 1) / kElementThreads);
}

[[noreturn]] void refuse(const std::string& message) {
  throw EngineError(EngineError::Kind::kDevice, "cuda kernels: " + message);
}

}  // namespace

void launch_embed(const int32_t* tokens, const TokenSlot* plan, const float* tok_embedding,
                  const float* pos_embedding, int n, int E, float* x, cudaStream_t stream) {
  if (n == 0) return;
  embed_kernel<<<n, kRowThreads, 0, stream>>>(tokens, plan, tok_embedding, pos_embedding, E, x);
  KVCHECK_CUDA_CHECK_LAUNCH("embed_kernel");
}

void launch_layer_norm(const float* x, const float* gain, const float* bias, int n, int E,
                       float eps, float* y, cudaStream_t stream) {
  if (n == 0) return;
  layer_norm_kernel<<<n, kRowThreads, 0, stream>>>(x, gain, bias, E, eps, y);
  KVCHECK_CUDA_CHECK_LAUNCH("layer_norm_kernel");
}

void launch_rms_norm(const float* x, const float* gain, int n, int E, float eps, float* y,
                     cudaStream_t stream) {
  if (n == 0) return;
  rms_norm_kernel<<<n, kRowThreads, 0, stream>>>(x, gain, E, eps, y);
  KVCHECK_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}

size_t matmul_partial_floats(int in, int out) {
  const int segments = matmul_segments(in);
  return segments > 1 ? size_t(segments) * size_t(out) * kMatmulMinPassRows : 0;
}

void launch_matmul(const float* x, int rows, const float* w, const float* bias, int in, int out,
                   float* partial, size_t partial_floats, float* y, cudaStream_t stream) {
  if (rows <= 0 || out <= 0) return;
  if (in <= 0) refuse("matmul with in = " + std::to_string(in));
  const int segments = matmul_segments(in);
  int rows_per_pass = rows;
  if (segments > 1) {
    const size_t fit = partial_floats / (size_t(segments) * size_t(out));
    if (fit < 1) {
      refuse("matmul scratch of " + std::to_string(partial_floats) + " floats is below one row (" +
             std::to_string(size_t(segments) * out) + ")");
    }
    rows_per_pass = static_cast<int>(std::min<size_t>(size_t(rows), fit));
  }
  // Passes split rows only; every element's reduction is the same in any pass.
  for (int r0 = 0; r0 < rows; r0 += rows_per_pass) {
    const int pass_rows = std::min(rows_per_pass, rows - r0);
    const float* pass_x = x + size_t(r0) * in;
    float* pass_y = y + size_t(r0) * out;
    if (pass_rows >= 32) {
      const dim3 grid(ceil_div(out, kMatmulTileOut), ceil_div(pass_rows, 8 * kMatmulRowGroups),
                      segments);
      matmul_kernel<8><<<grid, kMatmulThreads, 0, stream>>>(pass_x, pass_rows, w, bias, in, out,
                                                            partial, pass_y);
    } else {
      const dim3 grid(ceil_div(out, kMatmulTileOut), ceil_div(pass_rows, kMatmulRowGroups),
                      segments);
      matmul_kernel<1><<<grid, kMatmulThreads, 0, stream>>>(pass_x, pass_rows, w, bias, in, out,
                                                            partial, pass_y);
    }
    KVCHECK_CUDA_CHECK_LAUNCH("matmul_kernel");
    if (segments > 1) {
      const size_t count = size_t(pass_rows) * out;
      matmul_reduce_kernel<<<element_blocks(count), kElementThreads, 0, stream>>>(
          partial, segments, pass_rows, out, bias, pass_y);
      KVCHECK_CUDA_CHECK_LAUNCH("matmul_reduce_kernel");
    }
  }
}

void launch_rope_and_store(float* qkv, const TokenSlot* plan, int n, int H, const double* inv_freq,
                           KvCacheView cache, int layer, bool kv_swapped, bool in_token_order,
                           cudaStream_t stream) {
  if (n == 0) return;
  const int tokens_per_block = in_token_order ? n : 1;
  const int blocks = in_token_order ? 1 : n;
  rope_and_store_kernel<<<blocks, kRowThreads, 0, stream>>>(qkv, plan, n, H, inv_freq, cache, layer,
                                                            kv_swapped, tokens_per_block);
  KVCHECK_CUDA_CHECK_LAUNCH("rope_and_store_kernel");
}

void launch_rope_cached_keys(KvCacheView cache, int layer, int row, int slot_begin, int slot_end,
                             int position_offset, const double* inv_freq, cudaStream_t stream) {
  if (slot_end <= slot_begin) return;
  const dim3 grid(slot_end - slot_begin, cache.n_kv_heads);
  rope_cached_keys_kernel<<<grid, 64, 0, stream>>>(cache, layer, row, slot_begin, position_offset,
                                                   inv_freq);
  KVCHECK_CUDA_CHECK_LAUNCH("rope_cached_keys_kernel");
}

size_t attention_partial_floats(int n_tokens, int n_heads, int head_dim, int max_keys) {
  const size_t per_split = size_t(head_dim) + 2;  // o[D], then m and l
  return size_t(n_tokens) * n_heads * size_t(attention_splits(max_keys)) * per_split;
}

void launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.n_tokens == 0) return;
  const int D = a.cache.head_dim;
  if (D > kMaxAttentionHeadDim) {
    refuse("head_dim " + std::to_string(D) + " exceeds " + std::to_string(kMaxAttentionHeadDim));
  }
  const int group = a.n_heads / a.cache.n_kv_heads;
  const int head_blocks = ceil_div(group, kAttentionHeadsPerBlock);
  const int max_splits = attention_splits(a.max_keys);
  if (max_splits > 0) {
    const dim3 grid(a.n_tokens, a.cache.n_kv_heads * head_blocks, max_splits);
    attention_split_kernel<<<grid, kAttentionThreads, attention_shared_bytes(D), stream>>>(
        a, head_blocks, max_splits);
    KVCHECK_CUDA_CHECK_LAUNCH("attention_split_kernel");
  }
  const dim3 grid(a.n_tokens, a.n_heads);
  attention_combine_kernel<<<grid, kCombineThreads, sizeof(float) * size_t(max_splits), stream>>>(
      a, max_splits);
  KVCHECK_CUDA_CHECK_LAUNCH("attention_combine_kernel");
}

void launch_add(float* y, const float* x, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  add_kernel<<<element_blocks(count), kElementThreads, 0, stream>>>(y, x, count);
  KVCHECK_CUDA_CHECK_LAUNCH("add_kernel");
}

void launch_gelu_tanh(float* x, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  gelu_tanh_kernel<<<element_blocks(count), kElementThreads, 0, stream>>>(x, count);
  KVCHECK_CUDA_CHECK_LAUNCH("gelu_tanh_kernel");
}

void launch_silu_mul(float* gate, const float* up, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  silu_mul_kernel<<<element_blocks(count), kElementThreads, 0, stream>>>(gate, up, count);
  KVCHECK_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

// ---- storage moves -------------------------------------------------------------
// A slot range of one unit is, per layer, KVH runs `pitch` bytes apart: one
// 2D copy or set per layer and tensor.
namespace {

struct UnitSpan {
  size_t first;  // bytes from the start of K (or V) to (layer 0, unit, head 0, first slot)
  size_t bytes;  // bytes of the slot range of one head
  size_t pitch;  // bytes from one head's slots to the next head's
  size_t layer;  // bytes of one layer
};

UnitSpan unit_span(const KvCacheView& cache, int unit, int first, int end) {
  const size_t elem = size_t(kv_dtype_bytes(cache.dtype));
  UnitSpan s;
  s.first = cache.offset(0, unit, 0, first) * elem;
  s.bytes = size_t(end - first) * size_t(cache.head_dim) * elem;
  s.pitch = size_t(cache.capacity) * size_t(cache.head_dim) * elem;
  s.layer = cache.offset(1, 0, 0, 0) * elem;
  return s;
}

}  // namespace

void copy_unit_slots(KvCacheView cache, int n_layers, int from, int to, int n,
                     cudaStream_t stream) {
  if (from == to || n <= 0) return;
  const UnitSpan src = unit_span(cache, from, 0, n), dst = unit_span(cache, to, 0, n);
  for (int l = 0; l < n_layers; ++l) {
    for (void* base : {cache.k, cache.v}) {
      uint8_t* bytes = static_cast<uint8_t*>(base) + size_t(l) * src.layer;
      KVCHECK_CUDA_CHECK(cudaMemcpy2DAsync(bytes + dst.first, dst.pitch, bytes + src.first,
                                           src.pitch, src.bytes, size_t(cache.n_kv_heads),
                                           cudaMemcpyDeviceToDevice, stream));
    }
  }
}

void poison_unit_slots(KvCacheView cache, int n_layers, int unit, int first, int end,
                       cudaStream_t stream) {
  if (first >= end) return;
  const UnitSpan span = unit_span(cache, unit, first, end);
  for (int l = 0; l < n_layers; ++l) {
    for (void* base : {cache.k, cache.v}) {
      uint8_t* bytes = static_cast<uint8_t*>(base) + size_t(l) * span.layer + span.first;
      KVCHECK_CUDA_CHECK(
          cudaMemset2DAsync(bytes, span.pitch, 0xFF, span.bytes, size_t(cache.n_kv_heads), stream));
    }
  }
}

}  // namespace kvcheck::cuda
