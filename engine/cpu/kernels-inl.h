// SIMD bodies of the CPU kernels, compiled once per Highway target through
// hwy/foreach_target.h (see kernels.cc, the only dispatch point). The bodies
// live in one file per family (loads, matmul, attend, rowwise); this file
// states the contract they all keep.
//
// How invariance is kept (docs/KERNELS.md has the full story):
// - Every dot product (matmul output, attention score) owns one vector
//   accumulator that steps along the reduction index from 0 in whole vectors;
//   the remainder is loaded zero-padded into one more whole vector, and the
//   lanes are summed with SumOfLanes at the end. Register tiles only decide
//   how many of these independent accumulators run side by side, never how
//   any one of them is computed.
// - Reductions over keys are anchored at key 0: the softmax sum steps over
//   whole vectors of keys from 0; the weighted sum of values keeps two chains
//   per output lane (even and odd keys) that are added at the end.
// - Elementwise steps run the tail through the same vector code on a
//   zero-padded copy, so an element's bits never depend on where it sits.
// - Loads never peel for alignment; LoadU everywhere.

#if defined(KVCHECK_ENGINE_CPU_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVCHECK_ENGINE_CPU_KERNELS_INL_H_
#undef KVCHECK_ENGINE_CPU_KERNELS_INL_H_
#else
#define KVCHECK_ENGINE_CPU_KERNELS_INL_H_
#endif

#include "engine/cpu/kernels_attend-inl.h"
#include "engine/cpu/kernels_loads-inl.h"
#include "engine/cpu/kernels_matmul-inl.h"
#include "engine/cpu/kernels_rowwise-inl.h"

#endif  // KVCHECK_ENGINE_CPU_KERNELS_INL_H_
