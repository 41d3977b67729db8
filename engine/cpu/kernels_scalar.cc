// Plain scalar reference kernels: the KernelPath::kScalar implementation. Every
// reduction runs in index order 0..n-1 with one float accumulator, so the
// result depends only on the inputs and the reduction length. The SIMD path
// (kernels-inl.h) evaluates the same formulas with the same rounding steps
// except where docs/KERNELS.md says otherwise (reduction order, exp/tanh).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/kernels.h"

namespace kvcheck::cpu::scalar {
namespace {

// The GELU tanh form with its rounding steps spelled out so the SIMD path can
// repeat them one for one (only tanh itself differs between the paths).
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

}  // namespace

void matmul(const float* x, size_t rows, const float* w, const float* bias, size_t in, size_t out,
            size_t o_begin, size_t o_end, float* y) {
  for (size_t i = 0; i < rows; ++i) {
    const float* x_row = x + i * in;
    for (size_t o = o_begin; o < o_end; ++o) {
      const float* w_row = w + o * in;
      float sum = 0.0f;
      for (size_t k = 0; k < in; ++k) sum += x_row[k] * w_row[k];
      if (bias != nullptr) sum += bias[o];
      y[i * out + o] = sum;
    }
  }
}

void attend(const float* q, size_t group, const void* k, const void* v, KvDtype dtype,
            size_t kv_stride, size_t n_keys, size_t dim, float scale, float* scores, float* out) {
  // Contiguous storage is one block holding every key.
  attend_paged(q, group, &k, &v, std::max<size_t>(n_keys, 1), dtype, kv_stride, n_keys, dim, scale,
               scores, out);
}

namespace {

// The reference attention over keys 0..n_keys-1, key j's K and V rows at
// row(k_or_v, j) (contiguous, paged and ring storage differ only there).
template <class Row>
void attend_rows(const float* q, size_t group, const Row& row, KvDtype dtype, size_t kv_stride,
                 size_t n_keys, size_t dim, float scale, float* scores, float* out) {
  for (size_t g = 0; g < group; ++g) {
    const float* q_head = q + g * dim;
    float* p = scores + g * n_keys;
    float* out_head = out + g * dim;
    if (n_keys == 0) {
      std::fill(out_head, out_head + dim, 0.0f);
      continue;
    }
    for (size_t j = 0; j < n_keys; ++j) {
      const auto* k_row = row(true, j);
      float dot = 0.0f;
      for (size_t d = 0; d < dim; ++d) dot += q_head[d] * kv_load(k_row, dtype, kv_stride, d);
      p[j] = dot * scale;
    }
    // A NaN score needs no care here: exp(NaN - max) is NaN and so is the sum.
    float max_score = p[0];
    for (size_t j = 1; j < n_keys; ++j) max_score = std::max(max_score, p[j]);
    float sum = 0.0f;
    for (size_t j = 0; j < n_keys; ++j) {
      p[j] = std::exp(p[j] - max_score);
      sum += p[j];
    }
    std::fill(out_head, out_head + dim, 0.0f);
    for (size_t j = 0; j < n_keys; ++j) {
      const auto* v_row = row(false, j);
      for (size_t d = 0; d < dim; ++d) out_head[d] += p[j] * kv_load(v_row, dtype, kv_stride, d);
    }
    for (size_t d = 0; d < dim; ++d) out_head[d] /= sum;
  }
}

}  // namespace

void attend_paged(const float* q, size_t group, const void* const* k_blocks,
                  const void* const* v_blocks, size_t block_rows, KvDtype dtype, size_t kv_stride,
                  size_t n_keys, size_t dim, float scale, float* scores, float* out) {
  const size_t row_bytes = kv_row_bytes(dtype, kv_stride);
  const auto row = [&](bool key, size_t j) {
    const void* const* blocks = key ? k_blocks : v_blocks;
    return static_cast<const unsigned char*>(blocks[j / block_rows]) + (j % block_rows) * row_bytes;
  };
  attend_rows(q, group, row, dtype, kv_stride, n_keys, dim, scale, scores, out);
}

void attend_ring(const float* q, size_t group, const void* k, const void* v, size_t ring_rows,
                 size_t first_slot, KvDtype dtype, size_t kv_stride, size_t n_keys, size_t dim,
                 float scale, float* scores, float* out) {
  const size_t row_bytes = kv_row_bytes(dtype, kv_stride);
  const auto row = [&](bool key, size_t j) {
    return static_cast<const unsigned char*>(key ? k : v) +
           ((first_slot + j) % ring_rows) * row_bytes;
  };
  attend_rows(q, group, row, dtype, kv_stride, n_keys, dim, scale, scores, out);
}

void layer_norm(const float* x, const float* gain, const float* bias, size_t width, float eps,
                float* y) {
  if (width == 0) return;
  float sum = 0.0f;
  for (size_t i = 0; i < width; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(width);
  float sum_sq = 0.0f;
  for (size_t i = 0; i < width; ++i) {
    const float centered = x[i] - mean;
    sum_sq += centered * centered;
  }
  const float inv_std = 1.0f / std::sqrt(sum_sq / static_cast<float>(width) + eps);
  for (size_t i = 0; i < width; ++i) {
    float normalized = (x[i] - mean) * inv_std * gain[i];
    if (bias != nullptr) normalized += bias[i];
    y[i] = normalized;
  }
}

void rms_norm(const float* x, const float* gain, size_t width, float eps, float* y) {
  if (width == 0) return;
  float sum_sq = 0.0f;
  for (size_t i = 0; i < width; ++i) sum_sq += x[i] * x[i];
  const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(width) + eps);
  for (size_t i = 0; i < width; ++i) y[i] = x[i] * inv_rms * gain[i];
}

void gelu_tanh(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float inner = (v * v * v * kGeluCubic + v) * kGeluSqrt2OverPi;
    x[i] = (std::tanh(inner) + 1.0f) * v * 0.5f;
  }
}

void silu_mul(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (std::exp(-g) + 1.0f) * up[i];
  }
}

void add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void exp_inplace(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

void tanh_inplace(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
}

}  // namespace kvcheck::cpu::scalar
