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

  // The forward pass, defined in cpu_engine_forward-inl.h.
  void grow_scratch(size_t n);
  void embed(std::span<const BatchEntry> batch, const std::vector<TokenPlan>& plan);
  void norm(const std::vector<float>& gain, const std::vector<float>& bias, size_t t);
  void rope(float* head, int position) const;
  void rotate_stored(int row, int slot, int delta);
  void rotate_cached_keys_again(int layer, const BatchEntry& e);
  void store_token(const float* k, const float* v, int sl, int unit, int slot);
  void faulty_q8_scales(const float* k, const float* v, std::vector<float>& k_scales,
                        std::vector<float>& v_scales) const;
  void rope_token(size_t t, int position);
  const float* token_k(size_t t) const;
  const float* token_v(size_t t) const;
  void global_attention(int layer, const std::vector<TokenPlan>& plan);
  void window_attention(int layer, std::span<const BatchEntry> batch,
                        const std::vector<TokenPlan>& plan);
  void attend_window(int sl, const TokenPlan& p, int first, int ring, size_t t);
  void run_layer(int layer, std::span<const BatchEntry> batch, const std::vector<TokenPlan>& plan);
  void matmul(const float* x, size_t rows, const float* w, const float* bias, size_t in, size_t out,
              float* y);
  void attend_all(int layer, const std::vector<TokenPlan>& plan);
  size_t scores_per_thread() const;
  void attend_tokens(int layer, const std::vector<TokenPlan>& plan, size_t begin, size_t end,
                     float* scores);

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

#include "engine/cpu/cpu_engine_forward-inl.h"  // IWYU pragma: keep

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
