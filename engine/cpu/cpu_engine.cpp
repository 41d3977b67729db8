#include "engine/cpu/cpu_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "engine/cpu/kernels.h"
#include "engine/cpu/kv_cache.h"
#include "engine/cpu/packed_weights.h"
#include "engine/cpu/thread_pool.h"
#include "engine/sequence_table.h"

namespace kvcheck {
namespace {

using cpu::KvCache;
using cpu::PackedLayer;
using cpu::PackedWeights;

#ifdef KVCHECK_NO_FAULTS
using Table = BasicSequenceTable<false>;
#else
using Table = BasicSequenceTable<true>;
#endif

class CpuEngine final : public Engine {
 public:
  CpuEngine(const Config& config, cpu::PackedWeights weights, const EngineOptions& options)
      : config_(config),
        options_(options),
        path_(options.kernels == KernelPath::kReference ? cpu::KernelPath::kScalar
                                                        : cpu::KernelPath::kSimd),
        weights_(std::move(weights)),
        table_(config, options),
        // Paged: one row per block of both tiers plus the poison and sink blocks.
        cache_(config.n_layers, table_.paged() ? table_.storage_units() + 2 : options.max_rows,
               table_.paged() ? options.block_size : options.capacity, config.n_kv_heads,
               config.head_dim, options.kv_dtype, layer_slots(config, options)),
        pool_(options.threads) {
    const int half = config.head_dim / 2;
    for (int i = 0; i < half; ++i) {
      inv_freq_.push_back(std::pow(config.rope_theta, -2.0 * i / config.head_dim));
    }
  }

  const Config& config() const override { return config_; }
  const EngineOptions& options() const override { return options_; }
  std::string name() const override {
    return std::string("cpu-") + (path_ == cpu::KernelPath::kScalar ? "scalar" : "simd");
  }

  SequenceId start() override { return table_.start(); }

  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
    table_.check_batch(batch);
    const std::vector<int> reused = table_.prepare_step(batch, copy_slots(), poison_slots());
    // A prefix hit computes only the chunk's tokens after the reused ones.
    const std::span<const BatchEntry> computed = computed_part(batch, reused, trimmed_);
    const std::vector<TokenPlan> plan = table_.make_plan(computed);
    const size_t n = plan.size(), V = size_t(config_.vocab);
    std::vector<float> stale;  // [rows][V] the buffer as the caller left it (the fault reads it)
    if (has(Fault::kHitPromptLogitsStale)) stale = logits;
    logits.assign(n * V, 0.0f);
    if (n == 0) return;
    grow_scratch(n);
    embed(computed, plan);
    for (int layer = 0; layer < config_.n_layers; ++layer) run_layer(layer, computed, plan);
    const size_t E = size_t(config_.d_model);
    for (size_t t = 0; t < n; ++t) norm(weights_.final_norm, weights_.final_norm_bias, t);
    matmul(h_.data(), n, weights_.lm_head.data(), nullptr, E, V, logits.data());
    table_.commit(computed);
    spread_reused_rows(batch, reused, config_.vocab, logits);
    if (options_.prompt_logits) fill_prompt_rows(batch, reused, stale, logits);
  }

  int reused(SequenceId id) const override { return table_.reused(id); }

  // Prompt logits on a hit (EngineOptions::prompt_logits): a hit is always
  // a sequence's first chunk, so its reused rows are the logits of a cold
  // run of those tokens from position 0, computed on a private engine with
  // the same storage and no prefix cache (bitwise a cold run's: the engine
  // is invariant to chunking).
  void fill_prompt_rows(std::span<const BatchEntry> batch, const std::vector<int>& reused,
                        const std::vector<float>& stale, std::vector<float>& logits) {
    const size_t V = size_t(config_.vocab);
    size_t at = 0;  // first row of the entry
    for (size_t i = 0; i < batch.size(); at += batch[i].tokens.size(), ++i) {
      const size_t k = size_t(reused[i]);
      if (k == 0) continue;
      if (has(Fault::kHitPromptLogitsStale)) {
        for (size_t r = at * V; r < (at + k) * V; ++r) logits[r] = r < stale.size() ? stale[r] : 0;
        continue;
      }
      Engine& cold = prompt_engine();
      cold.reset();
      const BatchEntry entry{cold.start(), batch[i].tokens.first(k)};
      cold.step({&entry, 1}, prompt_rows_);
      std::copy(prompt_rows_.begin(), prompt_rows_.end(), logits.begin() + std::ptrdiff_t(at * V));
    }
  }

  Engine& prompt_engine() {
    if (!prompt_engine_) {
      EngineOptions cold = options_;
      cold.max_rows = 1;
      cold.pool_blocks = 0;
      cold.prefix_cache = cold.prompt_logits = false;
      cold.faults = FaultSet();
      prompt_engine_ = std::make_unique<CpuEngine>(config_, weights_, cold);
    }
    return *prompt_engine_;
  }

  void flush_prefix_cache() override { table_.flush_prefix_cache(poison_slots()); }

  // The host tier is rows of the same KvCache past the device pool's: a
  // copy between tiers is a copy between rows, and a snapshot of an
  // offloaded sequence reads its host rows through the block table.
  void offload(SequenceId id) override {
    if (!table_.paged()) {
      throw EngineError(EngineError::Kind::kBadBatch,
                        "offload: needs paged storage (block_size > 0) in this engine");
    }
    table_.offload(id, copy_slots(), poison_slots());
  }

  void finish(SequenceId id) override {
    if (table_.paged()) return table_.finish_paged(id, poison_slots());
    table_.finish(
        id, [&](int from, int to) { cache_.copy_row(from, to); },
        [&](int row) { cache_.clear_row(row); });
  }

  SequenceId start_keyed(uint64_t cache_key) override { return table_.start(cache_key); }

  void abort(SequenceId id) override {
    if (table_.paged()) return table_.abort_paged(id, poison_slots());
    finish(id);
  }

  void reset() override {
    const int layers = has(Fault::kResetClearsLayer0Only) ? 1 : config_.n_layers;
    if (table_.paged()) return table_.reset_paged(poison_slots(layers));
    table_.reset([&, layers](int row) { cache_.clear_row(row, layers); });
  }

  SequenceId fork(SequenceId parent, int n) override {
    refuse_with_window("fork");
    return table_.fork(parent, n, copy_slots());
  }

  void truncate(SequenceId id, int n) override {
    refuse_with_window("truncate");
    table_.truncate(id, n, poison_slots());
  }

  void erase(SequenceId id, int p0, int p1) override {
    table_.erase(
        id, p0, p1,
        [this](int row, int from, int to, int n) { cache_.move_slots(row, from, to, n); },
        poison_slots());
  }

  void shift(SequenceId id, int p0, int p1, int delta) override {
    table_.shift(id, p0, p1, delta,
                 [this](int row, int slot, int d) { rotate_stored(row, slot, d); });
  }

  // The same re-rotation as shift's, each cell by its own change (the
  // shift faults live there too).
  void div(SequenceId id, int p0, int p1, int d) override {
    table_.div(id, p0, p1, d,
               [this](int row, int slot, int delta) { rotate_stored(row, slot, delta); });
  }

  // The saved state is a copy of the sequence's slots' bytes, kept by the
  // table outside the storage (sequence_table_state-inl.h).
  void save_state(SequenceId id) override {
    refuse_with_window("save");
    table_.save(id,
                [this](int row, int first, int end) { return cache_.read_slots(row, first, end); });
  }

  void restore_state(SequenceId id) override {
    refuse_with_window("restore");
    table_.restore(
        id,
        [this](int row, int first, std::span<const uint8_t> bytes) {
          cache_.write_slots(row, first, bytes);
        },
        poison_slots());
  }

  PoolReport pool() const override { return table_.pool_report(); }

  std::string unheld_storage_check() const override {
    return table_.unheld_storage_check([this](bool key, int l, int unit, int g, int slot, int d) {
      // A windowed layer's ring has no slots past W: nothing there to hold.
      if (slot >= cache_.slots(l)) return true;
      return cache_.poisoned(key, l, unit, g, slot, d);
    });
  }

  int length(SequenceId id) const override { return table_.lookup(id, "length").length; }

  CacheSnapshot cache(SequenceId id, int layer) const override {
    CacheSnapshot snap = table_.snapshot_shell(id, layer);
    const SequenceState& s = table_.lookup(id, "cache");
    const KvDtype dtype = options_.kv_dtype;
    const size_t D = size_t(config_.head_dim), KVH = size_t(config_.n_kv_heads);
    const size_t head_bytes = D * size_t(kv_dtype_bytes(dtype));
    // q8_0 rows hold [blocks] scales, then the codes (kv_row_bytes).
    const size_t blocks = dtype == KvDtype::kQ8_0 ? q8_blocks(D) : 0, codes = 4 * blocks;
    const int sl = storage_layer(layer), row = storage_row(s.row);
    // A windowed layer's ring holds the last `ring` slots, slot p at p % ring;
    // the snapshot lists them in position order with their positions.
    const int ring = ring_slots(sl), first = std::max(0, snap.length - ring);
    if (first > 0) {
      snap.length -= first;
      snap.k.resize(size_t(snap.length) * KVH * head_bytes);
      snap.v.resize(snap.k.size());
      for (int i = 0; i < snap.length; ++i) snap.positions.push_back(first + i);
    }
    snap.k_scales.resize(size_t(snap.length) * KVH * blocks);
    snap.v_scales.resize(snap.k_scales.size());
    for (int pos = 0; pos < snap.length; ++pos) {
      // Paged: read through the block table, as attention does.
      const auto [unit, slot] = locate(row, (first + pos) % ring, poison_block());
      for (int g = 0; g < config_.n_kv_heads; ++g) {
        const size_t head = size_t(pos) * KVH + size_t(g);
        const uint8_t* k = cache_.k(sl, unit, g, slot);
        const uint8_t* v = cache_.v(sl, unit, g, slot);
        std::memcpy(snap.k.data() + head * head_bytes, k + codes, head_bytes);
        std::memcpy(snap.v.data() + head * head_bytes, v + codes, head_bytes);
        if (blocks == 0) continue;  // no scales (f32/bf16/f16): data() may be null
        std::memcpy(snap.k_scales.data() + head * blocks, k, 4 * blocks);
        std::memcpy(snap.v_scales.data() + head * blocks, v, 4 * blocks);
      }
    }
    return snap;
  }

  std::optional<StorageMap> storage_map() const override {
    // The map draws every layer with one slot count; rings have fewer.
    if (cache_.uneven()) return std::nullopt;
    StorageMap map =
        scan_storage(cache_.k_bytes(), cache_.v_bytes(), config_.n_layers, cache_.rows(),
                     config_.n_kv_heads, cache_.capacity(), config_.head_dim, options_.kv_dtype);
    map.unit = table_.paged() ? "block" : "row";
    table_.storage_holding(map.units, map.holders, map.held_slots);
    return map;
  }

  MemoryReport memory() const override {
    MemoryReport m;
    m.kv_bytes = cache_.bytes();
    m.weight_bytes = weights_.bytes();
    m.scratch_bytes = (x_.size() + h_.size() + qkv_.size() + att_.size() + mlp_.size() +
                       gate_.size() + scores_.size()) *
                      sizeof(float);
    m.metadata_bytes = table_.metadata_bytes();
    return m;
  }

 private:
  bool has(Fault f) const { return table_.has(f); }

  // Slots per row of each layer: a windowed layer keeps a ring of
  // min(W, capacity), a global one the capacity (contiguous storage only).
  static std::vector<int> layer_slots(const Config& config, const EngineOptions& options) {
    if (config.sliding_window == 0 || options.block_size > 0) return {};
    std::vector<int> slots;
    for (int l = 0; l < config.n_layers; ++l) {
      slots.push_back(config.layer_slots(l, options.capacity));
    }
    return slots;
  }

  // Slots a sequence keeps in a storage layer: a windowed layer's ring, or
  // the capacity (paged storage: cache_ rows are blocks, never rings).
  int ring_slots(int storage_layer) const {
    return table_.paged() ? options_.capacity : cache_.slots(storage_layer);
  }

  // A ring no longer holds what fell out of the window, so a fork or a
  // truncation cannot be honoured in general; refused whatever the lengths.
  void refuse_with_window(const char* call) const {
    if (config_.sliding_window == 0) return;
    throw EngineError(EngineError::Kind::kBadBatch,
                      std::string(call) + ": not supported with a sliding window (sliding_window " +
                          std::to_string(config_.sliding_window) +
                          "): the ring no longer holds the tokens that left the window");
  }

  int storage_row(int row) const { return table_.storage_row(row); }
  int storage_layer(int layer) const { return table_.storage_layer(layer); }
  TokenPlan at_layer(TokenPlan t, int layer) const { return table_.at_layer(t, layer); }

  // Paged storage keeps two blocks past both tiers: one never written (reads
  // past a block table see NaN) and one that absorbs writes past it.
  int poison_block() const { return table_.storage_units(); }
  int sink_block() const { return table_.storage_units() + 1; }
  // Storage row and slot of slot `slot` of the sequence in `row`.
  std::pair<int, int> locate(int row, int slot, int missing) const {
    if (!table_.paged()) return {row, slot};
    return table_.locate(row, slot, missing);
  }
  Table::CopySlots copy_slots() {
    return [this](int from, int to, int n) { cache_.copy_slots(from, to, n); };
  }
  Table::PoisonSlots poison_slots(int layers = -1) {
    return [this, layers](int unit, int first, int end) {
      cache_.poison_slots(unit, first, end, layers);
    };
  }

  void grow_scratch(size_t n) {
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

  void embed(std::span<const BatchEntry> batch, const std::vector<TokenPlan>& plan) {
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
  void norm(const std::vector<float>& gain, const std::vector<float>& bias, size_t t) {
    const size_t E = size_t(config_.d_model);
    const float eps = static_cast<float>(config_.norm_eps);
    if (config_.family == Family::kGpt2) {
      cpu::layer_norm(path_, x_.data() + t * E, gain.data(), bias.data(), E, eps,
                      h_.data() + t * E);
    } else {
      cpu::rms_norm(path_, x_.data() + t * E, gain.data(), E, eps, h_.data() + t * E);
    }
  }

  // Rotate-half RoPE of one head vector at `position`; angles in double so
  // the only float rounding is in the rotation itself.
  void rope(float* head, int position) const {
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
  void rotate_stored(int row, int slot, int delta) {
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
  void rotate_cached_keys_again(int layer, const BatchEntry& e) {
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
  void store_token(const float* k, const float* v, int sl, int unit, int slot) {
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
  void faulty_q8_scales(const float* k, const float* v, std::vector<float>& k_scales,
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
  void rope_token(size_t t, int position) {
    if (config_.family != Family::kLlama) return;
    const size_t D = size_t(config_.head_dim), Q = size_t(config_.q_width());
    float* q = qkv_.data() + t * (Q + 2 * size_t(config_.kv_width()));
    float* k = q + Q;
    for (int h = 0; h < config_.n_heads; ++h) rope(q + size_t(h) * D, position);
    for (int g = 0; g < config_.n_kv_heads; ++g) rope(k + size_t(g) * D, position);
  }

  // Token t's K and V ([KVH][D] each) from the step's qkv rows.
  const float* token_k(size_t t) const {
    const size_t Q = size_t(config_.q_width());
    return qkv_.data() + t * (Q + 2 * size_t(config_.kv_width())) + Q;
  }
  const float* token_v(size_t t) const { return token_k(t) + size_t(config_.kv_width()); }

  // A global layer: every fed token's K and V is written before any query
  // reads, so a chunk's token i attends to the chunk's tokens 0..i through the
  // cache; then the queries run in parallel.
  void global_attention(int layer, const std::vector<TokenPlan>& plan) {
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
  void window_attention(int layer, std::span<const BatchEntry> batch,
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
  void attend_window(int sl, const TokenPlan& p, int first, int ring, size_t t) {
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
                       options_.kv_dtype, D, n_keys, D, scale, scores_.data(),
                       out + first_head * D);
    }
  }

  void run_layer(int layer, std::span<const BatchEntry> batch, const std::vector<TokenPlan>& plan) {
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
  void matmul(const float* x, size_t rows, const float* w, const float* bias, size_t in, size_t out,
              float* y) {
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
  void attend_all(int layer, const std::vector<TokenPlan>& plan) {
    const size_t parts = std::min(size_t(pool_.size()), plan.size());
    const size_t block = (plan.size() + parts - 1) / parts;
    pool_.run(parts, [&](size_t i) {
      attend_tokens(layer, plan, i * block, std::min(plan.size(), (i + 1) * block),
                    scores_.data() + i * scores_per_thread());
    });
  }

  size_t scores_per_thread() const {
    return cpu::attend_scratch_floats(size_t(config_.group()), size_t(options_.capacity));
  }

  void attend_tokens(int layer, const std::vector<TokenPlan>& plan, size_t begin, size_t end,
                     float* scores) {
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

  Config config_;
  EngineOptions options_;
  cpu::KernelPath path_;
  PackedWeights weights_;
  Table table_;
  KvCache cache_;
  std::vector<double> inv_freq_;  // [D/2] theta^(-2i/D)
  cpu::ThreadPool pool_;

  // Scratch, grown to the largest step seen; n = tokens in the step.
  std::vector<float> x_;                   // [n][E] residual stream
  std::vector<float> h_;                   // [n][E] normed input / MLP output
  std::vector<float> qkv_;                 // [n][H*D + 2*KVH*D]
  std::vector<float> att_;                 // [n][H*D] attention output
  std::vector<float> mlp_;                 // [n][max(F, E)]
  std::vector<float> gate_;                // [n][F] llama only
  std::vector<float> scores_;              // [thread][group][capacity]
  std::vector<BatchEntry> trimmed_;        // [entry] the batch less its reused tokens
  std::unique_ptr<Engine> prompt_engine_;  // built at the first hit with prompt_logits
  std::vector<float> prompt_rows_;         // [reused tokens][V] its logits
};

}  // namespace

#ifdef KVCHECK_NO_FAULTS
#define KVCHECK_CPU_ENGINE_FACTORY make_cpu_engine_without_faults
#else
#define KVCHECK_CPU_ENGINE_FACTORY make_cpu_engine
#endif

namespace {

// Empty, or why the options cannot make an engine of a valid config.
std::string options_error(const Config& config, const EngineOptions& options) {
  std::ostringstream out;
  if (options.capacity < 1 || options.capacity > config.max_pos) {
    out << "capacity: " << options.capacity << " is out of range [1, max_pos " << config.max_pos
        << "]";
  } else if (options.max_rows < 1 || options.max_rows > 4096) {
    out << "max_rows: " << options.max_rows << " is out of range [1, 4096]";
  } else if (options.threads < 1 || options.threads > 256) {
    out << "threads: " << options.threads << " is out of range [1, 256]";
  } else if (config.sliding_window > 0 && options.block_size > 0) {
    out << "block_size: " << options.block_size
        << ": paged storage is not supported with a sliding window (sliding_window "
        << config.sliding_window << "; docs/OPERATIONS.md, \"Sliding windows\")";
  } else {
    out << storage_options_error(options);
  }
#ifdef KVCHECK_NO_FAULTS
  if (options.faults.any()) out << "faults: this engine was built without fault switches";
#endif
  return out.str();
}

}  // namespace

std::unique_ptr<Engine> KVCHECK_CPU_ENGINE_FACTORY(const Config& config, const Weights& weights,
                                                   const EngineOptions& options) {
  if (const std::string error = config.validate(); !error.empty()) throw InputError(error);
  if (const std::string error = check_shapes(config, weights); !error.empty()) {
    throw InputError(error);
  }
  if (const std::string error = options_error(config, options); !error.empty())
    throw InputError(error);
  return std::make_unique<CpuEngine>(config, cpu::pack_weights(config, weights), options);
}

#ifndef KVCHECK_NO_FAULTS
std::unique_ptr<Engine> make_cpu_engine_reading(const Config& config, const Weights& layout,
                                                const cpu::TensorSource& read,
                                                const EngineOptions& options) {
  if (const std::string error = config.validate(); !error.empty()) throw InputError(error);
  if (const std::string error = options_error(config, options); !error.empty())
    throw InputError(error);
  return std::make_unique<CpuEngine>(config, cpu::pack_weights(config, layout, read), options);
}
#endif

}  // namespace kvcheck
