// The CPU engine's forward pass: embedding, norms, RoPE, K/V stores and the
// attention of global and windowed layers, the MLP, and the fault switches
// that live in them. Member definitions of CpuEngine (cpu_engine.cpp), apart
// from the Engine interface and the bookkeeping; included once, by
// cpu_engine.cpp, after the class and inside its anonymous namespace (the
// file is compiled twice, with and without fault switches).
#pragma once

void CpuEngine::grow_scratch(size_t n) {
  const size_t E = size_t(config_.d_model), Q = size_t(config_.q_width()),
               KV = size_t(config_.kv_width()), F = size_t(config_.d_ff);
  x_.resize(n * E);
  h_.resize(n * E);
  qkv_.resize(n * (Q + 2 * KV));
  att_.resize(n * Q);
  mlp_.resize(n * std::max(F, E));
  gate_.resize(config_.family == Family::kLlama ? n * F : 0);
  scores_.resize(scores_per_thread() * size_t(pool_.size()));
}

void CpuEngine::embed(std::span<const BatchEntry> batch, const std::vector<TokenPlan>& plan) {
  const size_t E = size_t(config_.d_model);
  size_t t = 0;
  for (const BatchEntry& e : batch) {
    for (int32_t token : e.tokens) {
      float* x = x_.data() + t * E;
      std::memcpy(x, weights_.tok_embedding.data() + size_t(token) * E, E * sizeof(float));
      if (config_.family == Family::kGpt2) {
        const TokenPlan p = at_layer(plan[t], 0);
        cpu::add_inplace(path_, x, weights_.pos_embedding.data() + size_t(p.position) * E, E);
      }
      ++t;
    }
  }
}

// h_[t] = norm(x_[t]) with the family's norm.
void CpuEngine::norm(const std::vector<float>& gain, const std::vector<float>& bias, size_t t) {
  const size_t E = size_t(config_.d_model);
  const float eps = static_cast<float>(config_.norm_eps);
  if (config_.family == Family::kGpt2) {
    cpu::layer_norm(path_, x_.data() + t * E, gain.data(), bias.data(), E, eps, h_.data() + t * E);
  } else {
    cpu::rms_norm(path_, x_.data() + t * E, gain.data(), E, eps, h_.data() + t * E);
  }
}

// Rotate-half RoPE of one head vector at `position`; angles in double so
// the only float rounding is in the rotation itself.
void CpuEngine::rope(float* head, int position) const {
  const int half = config_.head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = position * inv_freq_[size_t(i)];
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    const float x1 = head[i], x2 = head[i + half];
    head[i] = x1 * c - x2 * s;
    head[i + half] = x2 * c + x1 * s;
  }
}

// Context shift: the stored key of one cell, every layer and KV head, is
// read, rotated by `delta` through the same rope() a fed key goes through,
// and stored again (a reduced-precision dtype rounds again; q8_0 takes a
// new scale). Values stay. The shift faults live here.
void CpuEngine::rotate_stored(int row, int slot, int delta) {
  if (config_.family != Family::kLlama || slot >= options_.capacity) return;
  if (has(Fault::kShiftKeepsK)) return;
  const int D = config_.head_dim;
  const int angle = has(Fault::kShiftWrongSign) ? -delta : delta;
  std::vector<float> head(size_t(D), 0.0f);  // [D] one head, widened
  for (int layer = 0; layer < config_.n_layers; ++layer) {
    for (int g = 0; g < config_.n_kv_heads; ++g) {
      for (int kind = 0; kind < (has(Fault::kShiftRotatesV) ? 2 : 1); ++kind) {
        uint8_t* stored = kind == 0 ? cache_.k(storage_layer(layer), row, g, slot)
                                    : cache_.v(storage_layer(layer), row, g, slot);
        for (int d = 0; d < D; ++d) {
          head[size_t(d)] = kv_load(stored, options_.kv_dtype, size_t(D), size_t(d));
        }
        rope(head.data(), angle);
        kv_store_row(head.data(), options_.kv_dtype, size_t(D), stored);
      }
    }
  }
}

// Fault: rotates each already-cached key of the sequence once more.
void CpuEngine::rotate_cached_keys_again(int layer, const BatchEntry& e) {
  const SequenceState& s = table_.lookup(e.sequence, "step");
  const int D = config_.head_dim;
  std::vector<float> key(size_t(D), 0.0f);
  // A ring keeps only the last `ring` slots (all of them when global).
  const int ring = ring_slots(storage_layer(layer));
  const int end = std::min(s.slot_base + s.length, options_.capacity);
  for (int slot = std::max(s.slot_base, end - ring); slot < end; ++slot) {
    const auto [unit, at] = locate(storage_row(s.row), slot % ring, sink_block());
    for (int g = 0; g < config_.n_kv_heads; ++g) {
      uint8_t* stored = cache_.k(storage_layer(layer), unit, g, at);
      for (int d = 0; d < D; ++d) {
        key[size_t(d)] = kv_load(stored, options_.kv_dtype, size_t(D), size_t(d));
      }
      rope(key.data(), s.position_base + s.position_of(slot - s.slot_base));
      kv_store_row(key.data(), options_.kv_dtype, size_t(D), stored);
    }
  }
}

// Stores one token's K and V ([KVH][D] each) into slot `slot` of `unit`.
void CpuEngine::store_token(const float* k, const float* v, int sl, int unit, int slot) {
  const size_t D = size_t(config_.head_dim), KVH = size_t(config_.n_kv_heads);
  const KvDtype dtype = options_.kv_dtype;
  if (has(Fault::kKvSwapped)) std::swap(k, v);
  // The scale faults of a quantized dtype; no override (nullptr) when off.
  std::vector<float> k_scales, v_scales;  // [KVH][blocks]
  if (dtype == KvDtype::kQ8_0 && (has(Fault::kKvScaleDropped) || has(Fault::kKvScalePerTensor) ||
                                  has(Fault::kKvScaleSharedKv))) {
    faulty_q8_scales(k, v, k_scales, v_scales);
  }
  const size_t blocks = k_scales.empty() ? 0 : q8_blocks(D);
  for (size_t g = 0; g < KVH; ++g) {
    kv_store_row(k + g * D, dtype, D, cache_.k(sl, unit, int(g), slot),
                 blocks ? k_scales.data() + g * blocks : nullptr);
    kv_store_row(v + g * D, dtype, D, cache_.v(sl, unit, int(g), slot),
                 blocks ? v_scales.data() + g * blocks : nullptr);
  }
}

// The q8_0 scales a scale fault stores for one token's K and V ([KVH][D]).
void CpuEngine::faulty_q8_scales(const float* k, const float* v, std::vector<float>& k_scales,
                                 std::vector<float>& v_scales) const {
  const size_t D = size_t(config_.head_dim), KVH = size_t(config_.n_kv_heads);
  const size_t blocks = q8_blocks(D);
  k_scales.resize(KVH * blocks);  // [KVH][blocks]
  v_scales.resize(KVH * blocks);  // [KVH][blocks]
  for (size_t g = 0; g < KVH; ++g) {
    q8_scales(k + g * D, D, k_scales.data() + g * blocks);
    q8_scales(v + g * D, D, v_scales.data() + g * blocks);
  }
  if (has(Fault::kKvScaleDropped)) {
    std::fill(k_scales.begin(), k_scales.end(), 1.0f);
    std::fill(v_scales.begin(), v_scales.end(), 1.0f);
  }
  if (has(Fault::kKvScalePerTensor)) {
    // amax / 127 is monotone in amax, so the tensor's scale is the largest
    // block scale, stored for every block.
    for (std::vector<float>* scales : {&k_scales, &v_scales}) {
      const float tensor = *std::max_element(scales->begin(), scales->end());
      std::fill(scales->begin(), scales->end(), tensor);
    }
  }
  if (has(Fault::kKvScaleSharedKv)) v_scales = k_scales;
}

// RoPE on token t's q and k (llama) at its planned position.
void CpuEngine::rope_token(size_t t, int position) {
  if (config_.family != Family::kLlama) return;
  const size_t D = size_t(config_.head_dim), Q = size_t(config_.q_width());
  float* q = qkv_.data() + t * (Q + 2 * size_t(config_.kv_width()));
  float* k = q + Q;
  for (int h = 0; h < config_.n_heads; ++h) rope(q + size_t(h) * D, position);
  for (int g = 0; g < config_.n_kv_heads; ++g) rope(k + size_t(g) * D, position);
}

// Token t's K and V ([KVH][D] each) from the step's qkv rows.
const float* CpuEngine::token_k(size_t t) const {
  const size_t Q = size_t(config_.q_width());
  return qkv_.data() + t * (Q + 2 * size_t(config_.kv_width())) + Q;
}

const float* CpuEngine::token_v(size_t t) const {
  return token_k(t) + size_t(config_.kv_width());
}

// A global layer: every fed token's K and V is written before any query
// reads, so a chunk's token i attends to the chunk's tokens 0..i through the
// cache; then the queries run in parallel.
void CpuEngine::global_attention(int layer, const std::vector<TokenPlan>& plan) {
  const int sl = storage_layer(layer);
  for (size_t t = 0; t < plan.size(); ++t) {
    const TokenPlan p = at_layer(plan[t], layer);
    rope_token(t, p.position);
    const auto [unit, slot] = locate(p.row, p.slot, sink_block());
    store_token(token_k(t), token_v(t), sl, unit, slot);
  }
  attend_all(layer, plan);
}

// A windowed layer keeps a ring of R = min(W, capacity) slots: slot s of
// the sequence lives at s % R. A chunk longer than one token would
// overwrite keys its own earlier rows still see, so each token is written
// and then attends before the next is written (docs/OPERATIONS.md,
// "Sliding windows"); every query still reads the same keys in the same
// order, so chunking and batching change no bits.
void CpuEngine::window_attention(int layer, std::span<const BatchEntry> batch,
                                 const std::vector<TokenPlan>& plan) {
  const int sl = storage_layer(layer), ring = cache_.slots(sl);
  const int W = config_.windowed(layer) ? config_.sliding_window : options_.capacity;
  size_t t = 0;
  for (const BatchEntry& e : batch) {
    for (size_t i = 0; i < e.tokens.size(); ++i, ++t) {
      const TokenPlan p = at_layer(plan[t], layer);
      rope_token(t, p.position);
      int slot = p.slot % ring;
      // Fault: the chunk's slots run on from its first one, unwrapped. A
      // write past the ring's end is lost (a real engine writes whatever
      // memory follows; this one stays memory-safe).
      if (has(Fault::kRingIndexUnwrapped)) slot = (p.slot - int(i)) % ring + int(i);
      if (slot < ring) store_token(token_k(t), token_v(t), sl, p.row, slot);
      // The window: slots first..n_keys-1, first = max(0, n_keys - W).
      int first = std::max(0, p.n_keys - W);
      if (has(Fault::kWindowOffByOne) && p.n_keys >= W) first += 1;
      if (has(Fault::kWindowPerChunk)) first = std::max(0, p.n_keys - int(i) - W);
      attend_window(sl, p, first, ring, t);
    }
  }
}

// Token t's attention over slots first..p.n_keys-1 of its ring.
void CpuEngine::attend_window(int sl, const TokenPlan& p, int first, int ring, size_t t) {
  const size_t D = size_t(config_.head_dim), Q = size_t(config_.q_width()),
               QKV = Q + 2 * size_t(config_.kv_width());
  const size_t group = size_t(config_.group());
  const float scale = static_cast<float>(1.0 / std::sqrt(double(config_.head_dim)));
  const float* q = qkv_.data() + t * QKV;
  float* out = att_.data() + t * Q;
  const bool tiled = has(Fault::kTiledKvHeads);
  const size_t n_keys = size_t(std::max(0, p.n_keys - first));
  for (int h = 0; h < (tiled ? config_.n_heads : config_.n_kv_heads); ++h) {
    const int g = tiled ? h % config_.n_kv_heads : h;
    const size_t first_head = tiled ? size_t(h) : size_t(g) * group;
    cpu::attend_ring(path_, q + first_head * D, tiled ? 1 : group, cache_.k(sl, p.row, g, 0),
                     cache_.v(sl, p.row, g, 0), size_t(ring), size_t(first % ring),
                     options_.kv_dtype, D, n_keys, D, scale, scores_.data(), out + first_head * D);
  }
}

void CpuEngine::run_layer(int layer, std::span<const BatchEntry> batch,
                          const std::vector<TokenPlan>& plan) {
  const PackedLayer& w = weights_.layers[size_t(layer)];
  const size_t n = plan.size();
  const size_t E = size_t(config_.d_model), F = size_t(config_.d_ff);
  const size_t Q = size_t(config_.q_width()), KV = size_t(config_.kv_width()), QKV = Q + 2 * KV;
  const bool llama = config_.family == Family::kLlama;

  for (size_t t = 0; t < n; ++t) norm(w.attn_norm, w.attn_norm_bias, t);
  matmul(h_.data(), n, w.wqkv.data(), w.bqkv.empty() ? nullptr : w.bqkv.data(), E, QKV,
         qkv_.data());

  if (llama && has(Fault::kRopeReapplied)) {
    for (const BatchEntry& e : batch) rotate_cached_keys_again(layer, e);
  }
  // A ring (also where shared_layer_cache points a global layer at layer
  // 0's ring) is only ever read and written through the ring's arithmetic.
  if (config_.windowed(layer) || cache_.slots(storage_layer(layer)) < cache_.capacity()) {
    window_attention(layer, batch, plan);
  } else {
    global_attention(layer, plan);
  }

  matmul(att_.data(), n, w.wo.data(), w.bo.empty() ? nullptr : w.bo.data(), Q, E, mlp_.data());
  cpu::add_inplace(path_, x_.data(), mlp_.data(), n * E);

  for (size_t t = 0; t < n; ++t) norm(w.mlp_norm, w.mlp_norm_bias, t);
  if (llama) {
    matmul(h_.data(), n, w.w_gate.data(), nullptr, E, F, gate_.data());
    matmul(h_.data(), n, w.w_up.data(), nullptr, E, F, mlp_.data());
    cpu::silu_mul(path_, gate_.data(), mlp_.data(), n * F);
    matmul(gate_.data(), n, w.w_down.data(), nullptr, F, E, h_.data());
  } else {
    matmul(h_.data(), n, w.w_up.data(), w.b_up.data(), E, F, mlp_.data());
    cpu::gelu_tanh(path_, mlp_.data(), n * F);
    // h_ is free again: the MLP input was consumed by the up projection.
    matmul(mlp_.data(), n, w.w_down.data(), w.b_down.data(), F, E, h_.data());
  }
  cpu::add_inplace(path_, x_.data(), h_.data(), n * E);
}

// y[rows][out] = x[rows][in] * w[out][in]^T (+ bias), output columns split
// over the pool in blocks of 16; each element's reduction stays whole.
void CpuEngine::matmul(const float* x, size_t rows, const float* w, const float* bias, size_t in,
                       size_t out, float* y) {
  const size_t parts = size_t(pool_.size());
  if (parts == 1 || out < 64) {
    cpu::matmul(path_, x, rows, w, bias, in, out, 0, out, y);
    return;
  }
  const size_t block = ((out + parts - 1) / parts + 15) / 16 * 16;
  pool_.run((out + block - 1) / block, [&](size_t i) {
    cpu::matmul(path_, x, rows, w, bias, in, out, i * block, std::min(out, (i + 1) * block), y);
  });
}

// Tokens are split into one contiguous block per thread, each with its own
// score scratch; a query's attention is never split.
void CpuEngine::attend_all(int layer, const std::vector<TokenPlan>& plan) {
  const size_t parts = std::min(size_t(pool_.size()), plan.size());
  const size_t block = (plan.size() + parts - 1) / parts;
  pool_.run(parts, [&](size_t i) {
    attend_tokens(layer, plan, i * block, std::min(plan.size(), (i + 1) * block),
                  scores_.data() + i * scores_per_thread());
  });
}

size_t CpuEngine::scores_per_thread() const {
  return cpu::attend_scratch_floats(size_t(config_.group()), size_t(options_.capacity));
}

void CpuEngine::attend_tokens(int layer, const std::vector<TokenPlan>& plan, size_t begin,
                              size_t end, float* scores) {
  const size_t D = size_t(config_.head_dim), Q = size_t(config_.q_width()),
               QKV = Q + 2 * size_t(config_.kv_width());
  const int group = config_.group();
  const float scale = static_cast<float>(1.0 / std::sqrt(double(config_.head_dim)));
  const int sl = storage_layer(layer);
  for (size_t t = begin; t < end; ++t) {
    const TokenPlan p = at_layer(plan[t], layer);
    const float* q = qkv_.data() + t * QKV;
    float* out = att_.data() + t * Q;
    const bool tiled = has(Fault::kTiledKvHeads);
    for (int h = 0; h < (tiled ? config_.n_heads : config_.n_kv_heads); ++h) {
      const int g = tiled ? h % config_.n_kv_heads : h;
      const size_t first_head = tiled ? size_t(h) : size_t(g) * size_t(group);
      const size_t heads = tiled ? 1 : size_t(group);
      if (!table_.paged()) {
        cpu::attend(path_, q + first_head * D, heads, cache_.k(sl, p.row, g, 0),
                    cache_.v(sl, p.row, g, 0), options_.kv_dtype, D, size_t(p.n_keys), D, scale,
                    scores, out + first_head * D);
        continue;
      }
      const size_t B = size_t(table_.block_size());
      const size_t n_blocks = (size_t(p.n_keys) + B - 1) / B;
      std::vector<const void*> k_blocks(n_blocks), v_blocks(n_blocks);  // [block] starts
      for (size_t b = 0; b < n_blocks; ++b) {
        const int unit = locate(p.row, int(b * B), poison_block()).first;
        k_blocks[b] = cache_.k(sl, unit, g, 0);
        v_blocks[b] = cache_.v(sl, unit, g, 0);
      }
      cpu::attend_paged(path_, q + first_head * D, heads, k_blocks.data(), v_blocks.data(), B,
                        options_.kv_dtype, D, size_t(p.n_keys), D, scale, scores,
                        out + first_head * D);
    }
  }
}
