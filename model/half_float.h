// The one f16/bf16 codec of the C++ side: the engines' K/V storage
// (engine/kv_dtype.h), the reduced-precision simulations and the safetensors
// reader all round and widen through these, so a value means the same bits
// everywhere. Rounding is to nearest even; NaN stays NaN. The SIMD widening in
// engine/cpu/kernels_loads-inl.h and the CUDA kernels match f16_to_float bit
// for bit (kernels_test).
#pragma once

#include <cstdint>

namespace kvcheck {

uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

}  // namespace kvcheck
