// Warp and block reductions of the CUDA kernels, in one place because their
// trees are part of every result's bits: each is a fixed xor butterfly whose
// shape depends only on the block size (a compile-time constant), never on
// the data, the grid or the batch.
#pragma once

#include <cuda_runtime.h>

namespace kvcheck::cuda {

inline constexpr unsigned kFullWarp = 0xffffffffu;
inline constexpr int kWarpSize = 32;

// Sum over the 32 lanes. Level by level lane l adds lane l ^ offset; both
// partners compute a + b == b + a, so every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = v + __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

// Max over the 32 lanes (exact, so any tree gives the same value). fmaxf
// skips a NaN operand; callers that must propagate NaN see it through the
// values they later compute from the max (exp(NaN - max) is NaN).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

// Sum over a block of kThreads threads (a multiple of 32, at most 1024);
// every thread gets the same bits. Warp sums first, then each warp sums the
// warp totals (absent warps as 0) with the same butterfly. scratch: 32 floats
// of shared memory, free again when it returns. All threads must call it.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  static_assert(kThreads % kWarpSize == 0 && kThreads <= 1024, "block size");
  constexpr int kWarps = kThreads / kWarpSize;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < kWarps ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  __syncthreads();
  return total;
}

}  // namespace kvcheck::cuda
