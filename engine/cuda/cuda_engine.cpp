// The CUDA engine's host side: the same bookkeeping as the CPU engine
// (engine/cpu/cpu_engine.cpp), all of it in the shared SequenceTable — rows,
// sequence states, the token plan with every fault switch, compaction and
// reset, and the operations (fork, truncate, the paged pool, the prefix
// cache) — driving the kernels of engine/cuda/kernels.h over device-resident
// weights and KV cache. Only the arithmetic and the storage moves are on the
// device; each switch behaves as on the CPU.
#include "engine/cuda/cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "engine/cuda/device.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/kernels.h"
#include "engine/sequence_table.h"

namespace kvcheck {
namespace {

using cuda::DeviceBuffer;
using cuda::KvCacheView;
using cuda::TokenSlot;

class CudaEngine final : public Engine {
 public:
  CudaEngine(const Config& config, const Weights& weights, const EngineOptions& options)
      : config_(config),
        options_(options),
        table_(config, options),
        // Paged: one unit per pool block plus the poison and sink blocks.
        units_(table_.paged() ? table_.pool_blocks() + 2 : options.max_rows),
        unit_slots_(table_.paged() ? options.block_size : options.capacity) {
    upload_weights(config, weights, weights_);
    allocate_matmul_scratch();
    const size_t elem = size_t(kv_dtype_bytes(options.kv_dtype));
    kv_block_bytes_ = size_t(config.n_layers) * size_t(units_) * size_t(unit_slots_) *
                      size_t(config.n_kv_heads) * size_t(config.head_dim) * elem;
    k_cache_.allocate(kv_block_bytes_, "KV cache (K)");
    v_cache_.allocate(kv_block_bytes_, "KV cache (V)");
#ifdef KVCHECK_POISON
    // Unwritten slots hold NaN (0xFF.. is a NaN in f32, bf16 and f16), so a
    // read of one surfaces, as on the CPU.
    constexpr int kFill = 0xFF;
#else
    constexpr int kFill = 0;
#endif
    KVCHECK_CUDA_CHECK(cudaMemset(k_cache_.get(), kFill, kv_block_bytes_));
    KVCHECK_CUDA_CHECK(cudaMemset(v_cache_.get(), kFill, kv_block_bytes_));
    if (config.family == Family::kLlama) {
      std::vector<double> inv_freq;
      for (int i = 0; i < config.head_dim / 2; ++i) {
        inv_freq.push_back(std::pow(config.rope_theta, -2.0 * i / config.head_dim));
      }
      inv_freq_.allocate(inv_freq.size() * sizeof(double), "RoPE frequencies");
      KVCHECK_CUDA_CHECK(cudaMemcpy(inv_freq_.get(), inv_freq.data(),
                                    inv_freq.size() * sizeof(double), cudaMemcpyHostToDevice));
    }
  }

  const Config& config() const override {
    return config_;
  }
  const EngineOptions& options() const override {
    return options_;
  }
  std::string name() const override {
    return "cuda";
  }

  SequenceId start() override {
    return table_.start();
  }

  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
    table_.check_batch(batch);
    const std::vector<int> reused = table_.prepare_step(batch, copy_slots(), poison_slots());
    // A prefix hit computes only the chunk's tokens after the reused ones.
    const std::span<const BatchEntry> computed = computed_part(batch, reused, trimmed_);
    const std::vector<TokenPlan> plan = table_.make_plan(computed);
    const size_t n = plan.size();
    logits.assign(n * size_t(config_.vocab), 0.0f);
    if (n == 0) return;

    // Paged: each entry's block table, [entry][stride] storage units, read
    // by attention; the same for every layer (no fault changes a row).
    std::vector<int32_t> tables;
    int stride = 0;
    if (table_.paged()) {
      int max_keys = 0;
      for (int layer = 0; layer < config_.n_layers; ++layer) {
        for (const TokenPlan& p : plan) max_keys = std::max(max_keys, at_layer(p, layer).n_keys);
      }
      const int B = table_.block_size();
      stride = std::max(1, (max_keys + B - 1) / B);
      size_t t = 0;
      for (const BatchEntry& e : computed) {
        for (int b = 0; b < stride; ++b) {
          tables.push_back(locate(plan[t].row, b * B, poison_block()).first);
        }
        t += e.tokens.size();
      }
    }

    // Every layer's view of every token, computed here once: [L][n].
    const int L = config_.n_layers;
    std::vector<TokenSlot> slots(size_t(L) * n);
    int max_keys = 0;
    for (int layer = 0; layer < L; ++layer) {
      size_t t = 0;
      for (size_t entry = 0; entry < computed.size(); ++entry) {
        for (size_t i = 0; i < computed[entry].tokens.size(); ++i, ++t) {
          const TokenPlan p = at_layer(plan[t], layer);
          const auto [unit, slot] = locate(p.row, p.slot, sink_block());
          slots[size_t(layer) * n + t] = {unit, p.position, slot, p.n_keys, int32_t(entry)};
          max_keys = std::max(max_keys, p.n_keys);
        }
      }
    }
    std::vector<int32_t> tokens;
    tokens.reserve(n);
    for (const BatchEntry& e : computed) {
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
    }

    grow_scratch(n, max_keys, tables.size());
    KVCHECK_CUDA_CHECK(
        cudaMemcpy(tokens_.get(), tokens.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
    KVCHECK_CUDA_CHECK(cudaMemcpy(slots_.get(), slots.data(), slots.size() * sizeof(TokenSlot),
                                  cudaMemcpyHostToDevice));
    if (!tables.empty()) {
      KVCHECK_CUDA_CHECK(cudaMemcpy(tables_.get(), tables.data(), tables.size() * sizeof(int32_t),
                                    cudaMemcpyHostToDevice));
    }

    const int N = static_cast<int>(n), E = config_.d_model, V = config_.vocab;
    cuda::launch_embed(tokens_.as<int32_t>(), slots_.as<TokenSlot>(), weights_.tok_embedding,
                       config_.family == Family::kGpt2 ? weights_.pos_embedding : nullptr, N, E,
                       x_.as<float>(), kStream);
    for (int layer = 0; layer < L; ++layer) {
      run_layer(layer, computed, std::span<const TokenSlot>(slots).subspan(size_t(layer) * n, n),
                slots_.as<TokenSlot>() + size_t(layer) * n, stride);
    }
    norm(weights_.final_norm, weights_.final_norm_bias, N);
    matmul(h_.as<float>(), N, weights_.lm_head, nullptr, E, V, logits_.as<float>());
    // Synchronizing copy: any kernel error of the step surfaces here.
    KVCHECK_CUDA_CHECK(cudaMemcpy(logits.data(), logits_.get(), n * size_t(V) * sizeof(float),
                                  cudaMemcpyDeviceToHost));

    table_.commit(computed);
    spread_reused_rows(batch, reused, config_.vocab, logits);
  }

  int reused(SequenceId id) const override {
    return table_.reused(id);
  }

  void flush_prefix_cache() override {
    table_.flush_prefix_cache(poison_slots());
  }

  void finish(SequenceId id) override {
    if (table_.paged()) return table_.finish_paged(id, poison_slots());
    table_.finish(
        id, [&](int from, int to) { copy_slots()(from, to, unit_slots_); },
        [&](int row) { poison_slots()(row, 0, unit_slots_); });
  }

  void reset() override {
    const int layers = has(Fault::kResetClearsLayer0Only) ? 1 : config_.n_layers;
    if (table_.paged()) return table_.reset_paged(poison_slots(layers));
    table_.reset([&, layers](int row) { poison_slots(layers)(row, 0, unit_slots_); });
  }

  SequenceId fork(SequenceId parent, int n) override {
    return table_.fork(parent, n, copy_slots());
  }

  void truncate(SequenceId id, int n) override {
    table_.truncate(id, n, poison_slots());
  }

  PoolReport pool() const override {
    return table_.pool_report();
  }

  // The whole device storage copied to the host and read there: a property
  // calls it once per call of a small case, so its cost does not matter.
  std::string unheld_storage_check() const override {
    const std::vector<uint8_t> k = download(k_cache_), v = download(v_cache_);
    const KvCacheView view = cache_view();
    const size_t elem = size_t(kv_dtype_bytes(options_.kv_dtype)), D = size_t(config_.head_dim);
    return table_.unheld_storage_check([&](bool key, int l, int unit, int g, int slot, int d) {
      const uint8_t* at = (key ? k : v).data() + view.offset(l, unit, g, slot) * elem;
      return std::isnan(kv_load(at, options_.kv_dtype, D, size_t(d)));
    });
  }

  int length(SequenceId id) const override {
    return table_.lookup(id, "length").length;
  }

  CacheSnapshot cache(SequenceId id, int layer) const override {
    CacheSnapshot snap = table_.snapshot_shell(id, layer);
    const SequenceState& s = table_.lookup(id, "cache");
    const size_t elem = size_t(kv_dtype_bytes(options_.kv_dtype));
    const size_t head_bytes = size_t(config_.head_dim) * elem;
    const size_t dst_pitch = size_t(config_.n_kv_heads) * head_bytes;
    const KvCacheView view = cache_view();
    const int sl = storage_layer(layer), row = storage_row(s.row);
    // Runs of positions in consecutive slots of one unit (the whole length
    // when contiguous, a block at a time when paged, read through the block
    // table as attention does). Device [slot][D] per KV head -> host
    // [pos][KVH][D]: one strided copy per run and head.
    for (int pos = 0; pos < snap.length;) {
      const auto [unit, slot] = locate(row, pos, poison_block());
      const int run = std::min(snap.length - pos, unit_slots_ - slot);
      for (int g = 0; g < config_.n_kv_heads; ++g) {
        const size_t src = view.offset(sl, unit, g, slot) * elem;
        const size_t dst = size_t(pos) * dst_pitch + size_t(g) * head_bytes;
        KVCHECK_CUDA_CHECK(cudaMemcpy2D(snap.k.data() + dst, dst_pitch,
                                        k_cache_.as<uint8_t>() + src, head_bytes, head_bytes,
                                        size_t(run), cudaMemcpyDeviceToHost));
        KVCHECK_CUDA_CHECK(cudaMemcpy2D(snap.v.data() + dst, dst_pitch,
                                        v_cache_.as<uint8_t>() + src, head_bytes, head_bytes,
                                        size_t(run), cudaMemcpyDeviceToHost));
      }
      pos += run;
    }
    return snap;
  }

  // The whole device storage copied to the host and scanned there: a report
  // calls it once per call of a small case, so its cost does not matter.
  std::optional<StorageMap> storage_map() const override {
    const std::vector<uint8_t> k = download(k_cache_), v = download(v_cache_);
    StorageMap map = scan_storage(k, v, config_.n_layers, units_, config_.n_kv_heads, unit_slots_,
                                  config_.head_dim, options_.kv_dtype);
    map.unit = table_.paged() ? "block" : "row";
    table_.storage_holding(map.units, map.holders, map.held_slots);
    return map;
  }

  MemoryReport memory() const override {
    MemoryReport m;
    m.kv_bytes = k_cache_.bytes() + v_cache_.bytes();
    m.weight_bytes = weights_.buffer.bytes();
    m.scratch_bytes = x_.bytes() + h_.bytes() + qkv_.bytes() + att_.bytes() + mlp_.bytes() +
                      gate_.bytes() + logits_.bytes() + tokens_.bytes() + slots_.bytes() +
                      tables_.bytes() + matmul_partial_.bytes() + attention_partial_.bytes() +
                      inv_freq_.bytes();
    m.metadata_bytes = table_.metadata_bytes();
    return m;
  }

 private:
  // The legacy default stream: every call of the engine is ordered after the
  // previous one, and the synchronizing copies mark the ends of calls.
  static constexpr cudaStream_t kStream = nullptr;

  bool has(Fault f) const {
    return table_.has(f);
  }
  int storage_row(int row) const {
    return table_.storage_row(row);
  }
  int storage_layer(int layer) const {
    return table_.storage_layer(layer);
  }
  TokenPlan at_layer(TokenPlan t, int layer) const {
    return table_.at_layer(t, layer);
  }

  KvCacheView cache_view() const {
    KvCacheView view;
    view.k = k_cache_.get();
    view.v = v_cache_.get();
    view.dtype = options_.kv_dtype;
    view.rows = units_;
    view.n_kv_heads = config_.n_kv_heads;
    view.capacity = unit_slots_;
    view.head_dim = config_.head_dim;
    return view;
  }

  // Paged storage keeps two blocks past the pool, as the CPU engine does:
  // one never written (reads past a block table see NaN) and one that
  // absorbs writes past it.
  int poison_block() const {
    return table_.pool_blocks();
  }
  int sink_block() const {
    return table_.pool_blocks() + 1;
  }
  // Storage unit and slot of slot `slot` of the sequence in `row`.
  std::pair<int, int> locate(int row, int slot, int missing) const {
    if (!table_.paged()) return {row, slot};
    return table_.locate(row, slot, missing);
  }
  SequenceTable::CopySlots copy_slots() {
    return [this](int from, int to, int n) {
      cuda::copy_unit_slots(cache_view(), config_.n_layers, from, to, n, kStream);
    };
  }
  // Slots of a unit in layers 0..layers-1 (all when -1) marked unwritten:
  // NaN when poisoning is compiled in, else left as they are.
  SequenceTable::PoisonSlots poison_slots(int layers = -1) {
#ifdef KVCHECK_POISON
    return [this, layers](int unit, int first, int end) {
      cuda::poison_unit_slots(cache_view(), layers < 0 ? config_.n_layers : layers, unit, first,
                              end, kStream);
    };
#else
    (void)layers;
    return [](int, int, int) {};
#endif
  }

  static std::vector<uint8_t> download(const DeviceBuffer& buffer) {
    std::vector<uint8_t> bytes(buffer.bytes());
    KVCHECK_CUDA_CHECK(
        cudaMemcpy(bytes.data(), buffer.get(), bytes.size(), cudaMemcpyDeviceToHost));
    return bytes;
  }

  // The matmul scratch for the largest (segments x outputs) of the model.
  void allocate_matmul_scratch() {
    const int E = config_.d_model, F = config_.d_ff, Q = config_.q_width();
    const int QKV = Q + 2 * config_.kv_width();
    matmul_partial_floats_ = 0;
    for (auto [in, out] : {std::pair{E, QKV}, {Q, E}, {E, F}, {F, E}, {E, config_.vocab}}) {
      matmul_partial_floats_ =
          std::max(matmul_partial_floats_, cuda::matmul_partial_floats(in, out));
    }
    matmul_partial_.allocate(matmul_partial_floats_ * sizeof(float), "matmul scratch");
  }

  // Scratch grows to the largest step seen (tokens) and the longest key
  // range (attention splits).
  void grow_scratch(size_t n, int max_keys, size_t table_entries) {
    const size_t E = size_t(config_.d_model), Q = size_t(config_.q_width()),
                 KV = size_t(config_.kv_width()), F = size_t(config_.d_ff),
                 V = size_t(config_.vocab);
    x_.reserve(n * E * sizeof(float), "activations x");
    h_.reserve(n * E * sizeof(float), "activations h");
    qkv_.reserve(n * (Q + 2 * KV) * sizeof(float), "activations qkv");
    att_.reserve(n * Q * sizeof(float), "attention output");
    mlp_.reserve(n * std::max(F, E) * sizeof(float), "MLP activations");
    if (config_.family == Family::kLlama) gate_.reserve(n * F * sizeof(float), "MLP gate");
    logits_.reserve(n * V * sizeof(float), "logits");
    tokens_.reserve(n * sizeof(int32_t), "token ids");
    slots_.reserve(n * size_t(config_.n_layers) * sizeof(TokenSlot), "token plan");
    tables_.reserve(table_entries * sizeof(int32_t), "block tables");
    attention_partial_.reserve(cuda::attention_partial_floats(static_cast<int>(n), config_.n_heads,
                                                              config_.head_dim, max_keys) *
                                   sizeof(float),
                               "attention splits");
  }

  // h = norm(x) for n rows with the family's norm.
  void norm(const float* gain, const float* bias, int n) {
    const float eps = static_cast<float>(config_.norm_eps);
    if (config_.family == Family::kGpt2) {
      cuda::launch_layer_norm(x_.as<float>(), gain, bias, n, config_.d_model, eps, h_.as<float>(),
                              kStream);
    } else {
      cuda::launch_rms_norm(x_.as<float>(), gain, n, config_.d_model, eps, h_.as<float>(), kStream);
    }
  }

  void matmul(const float* x, int rows, const float* w, const float* bias, int in, int out,
              float* y) {
    cuda::launch_matmul(x, rows, w, bias, in, out, matmul_partial_.as<float>(),
                        matmul_partial_floats_, y, kStream);
  }

  // Under a fault two tokens of one step can target the same (unit, slot);
  // then the store runs in token order so the last one wins, as on the CPU.
  bool slots_collide(std::span<const TokenSlot> slots) const {
    std::vector<long long> keys;
    keys.reserve(slots.size());
    for (const TokenSlot& s : slots) keys.push_back((long long)s.row * unit_slots_ + s.slot);
    std::sort(keys.begin(), keys.end());
    return std::adjacent_find(keys.begin(), keys.end()) != keys.end();
  }

  void run_layer(int layer, std::span<const BatchEntry> batch, std::span<const TokenSlot> slots,
                 const TokenSlot* device_slots, int table_stride) {
    const cuda::DeviceLayer& w = weights_.layers[size_t(layer)];
    const int n = static_cast<int>(slots.size());
    const int E = config_.d_model, F = config_.d_ff, Q = config_.q_width(),
              QKV = Q + 2 * config_.kv_width();
    const bool llama = config_.family == Family::kLlama;
    const int sl = storage_layer(layer);
    const KvCacheView view = cache_view();

    norm(w.attn_norm, w.attn_norm_bias, n);
    matmul(h_.as<float>(), n, w.wqkv, w.bqkv, E, QKV, qkv_.as<float>());

    if (llama && has(Fault::kRopeReapplied)) {
      // One launch per entry, in batch order: under shared_rows two entries
      // rotate the same slots, one after the other, as on the CPU.
      for (const BatchEntry& e : batch) rotate_cached_keys_again(view, sl, e);
    }
    // Every fed token's K and V are written before any query reads: a
    // chunk's token i attends to the chunk's tokens 0..i through the cache.
    cuda::launch_rope_and_store(qkv_.as<float>(), device_slots, n, config_.n_heads,
                                llama ? inv_freq_.as<double>() : nullptr, view, sl,
                                has(Fault::kKvSwapped), slots_collide(slots), kStream);

    int max_keys = 0;
    for (const TokenSlot& s : slots) max_keys = std::max(max_keys, int(s.n_keys));
    cuda::AttentionArgs args;
    args.qkv = qkv_.as<float>();
    args.qkv_stride = QKV;
    args.cache = view;
    args.layer = sl;
    args.n_heads = config_.n_heads;
    args.plan = device_slots;
    args.n_tokens = n;
    args.max_keys = max_keys;
    args.tiled_kv_heads = has(Fault::kTiledKvHeads);
    if (table_.paged()) {
      args.blocks = tables_.as<int32_t>();
      args.blocks_stride = table_stride;
      args.block_size = table_.block_size();
    }
    args.scale = static_cast<float>(1.0 / std::sqrt(double(config_.head_dim)));
    args.out = att_.as<float>();
    args.partial = attention_partial_.as<float>();
    cuda::launch_attention(args, kStream);

    const size_t count = size_t(n) * size_t(E);
    matmul(att_.as<float>(), n, w.wo, w.bo, Q, E, mlp_.as<float>());
    cuda::launch_add(x_.as<float>(), mlp_.as<float>(), count, kStream);

    norm(w.mlp_norm, w.mlp_norm_bias, n);
    if (llama) {
      matmul(h_.as<float>(), n, w.w_gate, nullptr, E, F, gate_.as<float>());
      matmul(h_.as<float>(), n, w.w_up, nullptr, E, F, mlp_.as<float>());
      cuda::launch_silu_mul(gate_.as<float>(), mlp_.as<float>(), size_t(n) * size_t(F), kStream);
      matmul(gate_.as<float>(), n, w.w_down, nullptr, F, E, h_.as<float>());
    } else {
      matmul(h_.as<float>(), n, w.w_up, w.b_up, E, F, mlp_.as<float>());
      cuda::launch_gelu_tanh(mlp_.as<float>(), size_t(n) * size_t(F), kStream);
      // h_ is free again: the MLP input was consumed by the up projection.
      matmul(mlp_.as<float>(), n, w.w_down, w.b_down, F, E, h_.as<float>());
    }
    cuda::launch_add(x_.as<float>(), h_.as<float>(), count, kStream);
  }

  // Fault rope_reapplied: rotates each already-cached key of the sequence
  // once more, unit by unit (a block at a time when paged; slots past its
  // table would go to the sink block, which nothing reads, so they are
  // skipped).
  void rotate_cached_keys_again(const KvCacheView& view, int sl, const BatchEntry& e) {
    const SequenceState& s = table_.lookup(e.sequence, "step");
    const int end = std::min(s.slot_base + s.length, options_.capacity);
    for (int slot = s.slot_base; slot < end;) {
      const auto [unit, at] = locate(storage_row(s.row), slot, sink_block());
      const int run = std::min(end - slot, unit_slots_ - at);
      if (unit != sink_block() || !table_.paged()) {
        // Within the unit, slot `at` holds the sequence's slot `slot`.
        cuda::launch_rope_cached_keys(view, sl, unit, at, at + run,
                                      s.position_base - s.slot_base + slot - at,
                                      inv_freq_.as<double>(), kStream);
      }
      slot += run;
    }
  }

  Config config_;
  EngineOptions options_;
  SequenceTable table_;
  int units_;       // storage units: rows, or pool blocks + the poison and sink blocks
  int unit_slots_;  // slots per unit: capacity, or the block size

  // Device memory.
  cuda::DeviceWeights weights_;
  DeviceBuffer inv_freq_;  // [D/2] double theta^(-2i/D), llama only
  size_t kv_block_bytes_ = 0;
  DeviceBuffer k_cache_;  // [layer][unit][kv_head][slot][dim] of kv_dtype
  DeviceBuffer v_cache_;  // [layer][unit][kv_head][slot][dim] of kv_dtype

  // Scratch, grown to the largest step seen; n = tokens in the step.
  DeviceBuffer x_;               // [n][E] residual stream
  DeviceBuffer h_;               // [n][E] normed input / MLP output
  DeviceBuffer qkv_;             // [n][H*D + 2*KVH*D]
  DeviceBuffer att_;             // [n][H*D] attention output
  DeviceBuffer mlp_;             // [n][max(F, E)]
  DeviceBuffer gate_;            // [n][F] llama only
  DeviceBuffer logits_;          // [n][V]
  DeviceBuffer tokens_;          // [n] int32 token ids
  DeviceBuffer slots_;           // [L][n] TokenSlot: each layer's view of each token
  DeviceBuffer tables_;          // paged: [entry][blocks] int32 storage unit of each logical block
  DeviceBuffer matmul_partial_;  // [segments][rows][out] floats, fixed size
  size_t matmul_partial_floats_ = 0;
  DeviceBuffer attention_partial_;   // [n][H][splits][D], then [n][H][splits][2] floats
  std::vector<BatchEntry> trimmed_;  // [entry] the batch less its reused tokens
};

}  // namespace

bool cuda_device_available() {
  return cuda::device_present();
}

std::unique_ptr<Engine> make_cuda_engine(const Config& config, const Weights& weights,
                                         const EngineOptions& options) {
  if (const std::string error = config.validate(); !error.empty()) throw InputError(error);
  if (const std::string error = check_shapes(config, weights); !error.empty()) {
    throw InputError(error);
  }
  std::ostringstream out;
  if (options.capacity < 1 || options.capacity > config.max_pos) {
    out << "capacity: " << options.capacity << " is out of range [1, max_pos " << config.max_pos
        << "]";
  } else if (options.max_rows < 1 || options.max_rows > 4096) {
    out << "max_rows: " << options.max_rows << " is out of range [1, 4096]";
  } else if (options.threads < 1 || options.threads > 256) {
    out << "threads: " << options.threads << " is out of range [1, 256]";
  } else if (config.head_dim > cuda::kMaxAttentionHeadDim) {
    out << "head_dim: " << config.head_dim << " exceeds the CUDA engine's limit of "
        << cuda::kMaxAttentionHeadDim;
  } else if (options.kv_dtype == KvDtype::kQ8_0) {
    // docs/OPERATIONS.md, "K/V dtypes": quantized K/V is CPU-only so far; the
    // CUDA backend's traits do not declare it.
    out << "kv_dtype: q8_0 is not supported by the CUDA engine (f32, bf16 or f16)";
  } else if (options.host_blocks != 0) {
    // No host tier until a device can test one (operations.offload false).
    out << "host_blocks: " << options.host_blocks << ": the CUDA engine has no host tier (0 only)";
  } else {
    out << storage_options_error(options);
  }
  if (!out.str().empty()) throw InputError(out.str());
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    throw EngineError(EngineError::Kind::kDevice,
                      std::string("cuda: no CUDA device is available (") +
                          (error != cudaSuccess ? cudaGetErrorString(error) : "0 devices") + ")");
  }
  return std::make_unique<CudaEngine>(config, weights, options);
}

}  // namespace kvcheck
