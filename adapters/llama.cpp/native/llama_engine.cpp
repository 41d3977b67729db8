// The llama.cpp calls behind each Engine call (llama_engine.h). The
// SequenceTable validates and keeps the cells; llama.cpp only follows.
#include "llama_engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "llama.h"
#include "llama_state.h"

namespace kvcheck::llama_native {
namespace {

// Cells per sequence llama.cpp is asked for: every cell kvcheck may fill and
// every position it may reach (after an erase the positions run ahead of
// the cells, up to max_pos).
uint32_t cells_per_sequence(const Config& config, const EngineOptions& options) {
  return uint32_t(std::max(options.capacity, config.max_pos));
}

// The SequenceTable's options: with llama_refuses, a capacity llama.cpp
// reaches first, so that the table never refuses for capacity.
EngineOptions table_options(EngineOptions options, const LlamaOptions& llama) {
  if (llama.llama_refuses) options.capacity += 256;
  return options;
}

llama_context* make_context(llama_model* model, const Config& config, const EngineOptions& options,
                            const LlamaOptions& llama) {
  llama_context_params p = llama_context_default_params();
  const uint32_t rows = uint32_t(options.max_rows);
  p.n_seq_max = rows + 1;  // and the spare (LlamaEngine::apply_pending_updates)
  p.n_ctx = (rows + 1) * cells_per_sequence(config, options);
  if (llama.llama_refuses) {  // and the filler; llama.cpp would round n_ctx up to
    p.n_seq_max = rows + 2;   // 256 but cap n_batch at the n_ctx asked for
    p.n_ctx = (rows * uint32_t(options.capacity) + 1 + 255) / 256 * 256;
  }
  // One llama_batch holds any step (capacity tokens per sequence); llama.cpp
  // splits it into micro-batches of n_ubatch, the same split for the same
  // step, so results stay deterministic.
  p.n_batch = std::max<uint32_t>({512, rows * uint32_t(options.capacity), p.n_ctx});
  p.n_ubatch = 512;
  p.n_threads = p.n_threads_batch = 1;
  p.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  p.type_k = p.type_v = GGML_TYPE_F32;
  p.kv_unified = llama.unified || llama.llama_refuses;
  p.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, p);
  if (ctx == nullptr) throw std::runtime_error("llama_init_from_model failed");
  return ctx;
}

// Diagnosis only: with KVCHECK_LLAMA_TRACE=FILE (as the Node adapter's
// trace), each step llama_decode refused is appended as one JSON line, so
// that a campaign's refusals by llama.cpp can be counted.
void trace_refusal(size_t entries, size_t tokens) {
  const char* file = std::getenv("KVCHECK_LLAMA_TRACE");
  if (file == nullptr || *file == 0) return;
  if (std::FILE* f = std::fopen(file, "a")) {
    std::fprintf(f, "{\"op\":\"step\",\"entries\":%zu,\"tokens\":%zu,\"result\":\"capacity\"}\n",
                 entries, tokens);
    std::fclose(f);
  }
}

}  // namespace

LlamaEngine::LlamaEngine(llama_model* model, const Config& config, const EngineOptions& options,
                         LlamaOptions llama)
    : config_(config),
      options_(options),
      llama_(llama),
      table_(config, table_options(options, llama)),
      ctx_(make_context(model, config, options, llama)),
      owner_(size_t(options.max_rows), -1) {}

LlamaEngine::~LlamaEngine() {
  llama_free(ctx_);
}

void LlamaEngine::leave_free(int free) {
  int held = 0;
  for (const SequenceId o : owner_) held += o == -1 ? 0 : table_.lookup(o, "step").length;
  const int target = int(llama_n_ctx(ctx_)) - held - free;  // > 0: n_ctx > rows * capacity
  const llama_seq_id filler = llama_seq_id(options_.max_rows + 1);
  if (target < filler_) llama_memory_seq_rm(llama_get_memory(ctx_), filler, target, -1);
  if (target > filler_) {
    llama_batch b = llama_batch_init(target - filler_, 0, 1);
    for (int i = filler_; i < target; ++i) {
      const int k = i - filler_;
      b.token[k] = 0, b.pos[k] = i, b.n_seq_id[k] = 1, b.seq_id[k][0] = filler;
      b.logits[k] = i + 1 == target;
    }
    b.n_tokens = target - filler_;
    const int32_t rc = llama_decode(ctx_, b);
    llama_batch_free(b);
    if (rc != 0)
      throw std::runtime_error("llama_decode of the filler returned " + std::to_string(rc));
  }
  filler_ = target;
}

void LlamaEngine::leave_room_for(std::span<const BatchEntry> batch) {
  // Each entry may fill the cells its sequence has left; llama.cpp counts
  // the stream's free cells, so it finds fewer than the step's tokens
  // exactly when some entry passes its sequence's capacity.
  int free = 0;
  for (const BatchEntry& e : batch) {
    const int room = options_.capacity - table_.lookup(e.sequence, "step").length;
    free += std::min(int(e.tokens.size()), room);
  }
  leave_free(free);
}

std::string LlamaEngine::name() const {
  return std::string("llama.cpp-native-unified-") +
         (llama_.unified || llama_.llama_refuses ? "on" : "off") +
         (llama_.llama_refuses ? "-capacity-by-llama" : "");
}

int LlamaEngine::seq(SequenceId id) const {
  const auto it = std::find(owner_.begin(), owner_.end(), id);
  if (it == owner_.end())
    throw std::logic_error("sequence " + std::to_string(id) + " has no llama seq id");
  return int(it - owner_.begin());
}

SequenceId LlamaEngine::start() {
  const SequenceId id = table_.start();  // kRows when every row is taken
  *std::find(owner_.begin(), owner_.end(), SequenceId(-1)) = id;
  return id;
}

void LlamaEngine::step(std::span<const BatchEntry> batch, std::vector<float>& logits) {
  table_.check_batch(batch);  // every refusal, before llama.cpp sees the step
  const std::vector<TokenPlan> plan = table_.make_plan(batch);
  logits.clear();
  if (plan.empty()) return;  // an empty batch, as the in-tree engines: nothing to decode
  if (llama_.llama_refuses) leave_room_for(batch);
  llama_batch b = llama_batch_init(int32_t(plan.size()), 0, 1);
  size_t t = 0;
  for (const BatchEntry& e : batch) {
    const int s = seq(e.sequence);
    for (const int32_t token : e.tokens) {
      b.token[t] = token;
      b.pos[t] = plan[t].position;
      b.n_seq_id[t] = 1;
      b.seq_id[t][0] = s;
      b.logits[t] = 1;
      ++t;
    }
  }
  b.n_tokens = int32_t(t);
  const int32_t rc = llama_decode(ctx_, b);
  llama_batch_free(b);
  // llama.h: 1 "could not find a KV slot for the batch"; only the filler
  // makes it one of kvcheck's refusals (LlamaOptions::llama_refuses).
  if (rc == 1 && llama_.llama_refuses) {
    trace_refusal(batch.size(), t);
    throw EngineError(EngineError::Kind::kCapacity, "llama_decode returned 1 (no KV slot)");
  }
  if (rc != 0) throw std::runtime_error("llama_decode returned " + std::to_string(rc));
  const size_t V = size_t(config_.vocab);
  logits.resize(t * V);  // [N][V]
  for (size_t i = 0; i < t; ++i) {
    const float* row = llama_get_logits_ith(ctx_, int32_t(i));
    if (row == nullptr)
      throw std::runtime_error("llama_get_logits_ith(" + std::to_string(i) + ") is null");
    std::copy(row, row + V, logits.begin() + std::ptrdiff_t(i * V));
  }
  table_.commit(batch);
  pending_ = false;  // the decode applied llama.cpp's queued updates
}

void LlamaEngine::finish(SequenceId id) {
  pending_ = true;
  table_.lookup(id, "finish");  // kUnknownSequence before anything changes
  const int s = seq(id);
  table_.finish(
      id, [](int, int) {}, [](int) {});
  owner_[size_t(s)] = -1;
  // --finish-by keep: where one sequence survives, "removes all tokens that
  // do not belong to" it (llama.h) must leave exactly what seq_rm leaves.
  const auto live = [](SequenceId o) { return o != -1; };
  if (llama_.finish_by_keep && std::count_if(owner_.begin(), owner_.end(), live) == 1) {
    const auto survivor = std::find_if(owner_.begin(), owner_.end(), live) - owner_.begin();
    llama_memory_seq_keep(llama_get_memory(ctx_), llama_seq_id(survivor));
    filler_ = 0;  // one stream (llama_refuses): the filler's cells went too
    return;
  }
  llama_memory_seq_rm(llama_get_memory(ctx_), s, -1, -1);  // a whole sequence never fails
}

void LlamaEngine::reset() {
  pending_ = true;
  table_.reset([](int) {});
  llama_memory_clear(llama_get_memory(ctx_), true);
  std::fill(owner_.begin(), owner_.end(), SequenceId(-1));
  filler_ = 0;
}

std::vector<int> LlamaEngine::slot_positions(SequenceId id, int from, int to) const {
  const SequenceState& s = table_.lookup(id, "positions");
  std::vector<int> positions;
  for (int i = from; i < to; ++i) positions.push_back(s.position_of(i));
  return positions;
}

void LlamaEngine::remove_positions(int s, std::vector<int> positions) {
  std::sort(positions.begin(), positions.end());
  for (size_t i = 0; i < positions.size();) {
    size_t j = i + 1;
    while (j < positions.size() && positions[j] == positions[j - 1] + 1) ++j;
    if (!llama_memory_seq_rm(llama_get_memory(ctx_), s, positions[i], positions[j - 1] + 1))
      throw std::runtime_error("llama_memory_seq_rm(" + std::to_string(s) + ", " +
                               std::to_string(positions[i]) + ", " +
                               std::to_string(positions[j - 1] + 1) + ") failed");
    i = j;
  }
}

SequenceId LlamaEngine::fork(SequenceId parent, int n) {
  pending_ = true;
  const int length = table_.lookup_count(parent, n, "fork").length;
  const SequenceId child = table_.fork(parent, n, [](int, int, int) {});  // kRows, kBadBatch
  *std::find(owner_.begin(), owner_.end(), SequenceId(-1)) = child;
  if (n == 0) return child;
  llama_memory_seq_cp(llama_get_memory(ctx_), seq(parent), seq(child), -1, -1);
  remove_positions(seq(child), slot_positions(parent, n, length));
  return child;
}

void LlamaEngine::truncate(SequenceId id, int n) {
  pending_ = true;
  const int length = table_.lookup_count(id, n, "truncate").length;
  std::vector<int> doomed = slot_positions(id, length - n, length);
  table_.truncate(id, n, [](int, int, int) {});
  remove_positions(seq(id), std::move(doomed));
}

void LlamaEngine::erase(SequenceId id, int p0, int p1) {
  pending_ = true;
  table_.erase(
      id, p0, p1, [](int, int, int, int) {}, [](int, int, int) {});  // kBadBatch
  if (p1 > p0 && !llama_memory_seq_rm(llama_get_memory(ctx_), seq(id), p0, p1))
    throw std::runtime_error("llama_memory_seq_rm failed");
}

void LlamaEngine::shift(SequenceId id, int p0, int p1, int delta) {
  pending_ = true;
  table_.shift(id, p0, p1, delta, [](int, int, int) {});  // kBadBatch, changing nothing
  if (delta != 0 && p1 > p0) llama_memory_seq_add(llama_get_memory(ctx_), seq(id), p0, p1, delta);
}

void LlamaEngine::div(SequenceId id, int p0, int p1, int d) {
  pending_ = true;
  std::vector<int> held = slot_positions(id, 0, table_.lookup(id, "div").length);
  table_.div(id, p0, p1, d, [](int, int, int) {});  // kBadBatch, changing nothing
  if (d == 1 || p1 <= p0) return;
  llama_memory_t mem = llama_get_memory(ctx_);
  if (!llama_.div_by_add) return llama_memory_seq_div(mem, seq(id), p0, p1, d);
  // Ascending: a cell lands below every position still to move, so none
  // is moved twice.
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  for (const int p : held) {
    if (p >= p0 && p < p1 && p / d != p) llama_memory_seq_add(mem, seq(id), p, p + 1, p / d - p);
  }
}

// The state as llama.cpp writes it for the sequence now: a user's save.
void LlamaEngine::save_state(SequenceId id) {
  table_.save(id, [this, id](int, int, int) {
    const llama_seq_id s = llama_seq_id(seq(id));
    std::vector<uint8_t> bytes(llama_state_seq_get_size(ctx_, s));
    bytes.resize(llama_state_seq_get_data(ctx_, bytes.data(), bytes.size(), s));
    return bytes;
  });
}

// llama.cpp clears the destination sequence's cells, then writes the saved
// ones (llama_kv_cache::state_read); the table's cells follow.
void LlamaEngine::restore_state(SequenceId id) {
  table_.lookup(id, "restore");
  pending_ = true;
  table_.restore(
      id,
      [this, id](int, int, std::span<const uint8_t> bytes) {
        const llama_seq_id s = llama_seq_id(seq(id));
        if (llama_state_seq_set_data(ctx_, bytes.data(), bytes.size(), s) != bytes.size())
          throw std::runtime_error("llama_state_seq_set_data(" + std::to_string(s) + ") failed");
      },
      [](int, int, int) {});
}

int LlamaEngine::length(SequenceId id) const {
  return table_.lookup(id, "length").length;
}

void LlamaEngine::apply_pending_updates() const {
  if (!pending_) return;
  const llama_seq_id spare = llama_seq_id(options_.max_rows);
  llama_batch b = llama_batch_init(1, 0, 1);
  b.token[0] = 0, b.pos[0] = 0, b.n_seq_id[0] = 1, b.seq_id[0][0] = spare, b.logits[0] = 1;
  b.n_tokens = 1;
  const int32_t rc = llama_decode(ctx_, b);
  llama_batch_free(b);
  llama_memory_seq_rm(llama_get_memory(ctx_), spare, -1, -1);
  if (rc != 0) throw std::runtime_error("llama_decode of the spare returned " + std::to_string(rc));
  pending_ = false;
}

CacheSnapshot LlamaEngine::cache(SequenceId id, int layer) const {
  const SequenceState& held = table_.lookup(id, "cache");
  if (layer < 0 || layer >= config_.n_layers)
    throw std::invalid_argument("cache: layer " + std::to_string(layer) + " outside [0, " +
                                std::to_string(config_.n_layers) + ")");
  apply_pending_updates();
  const llama_seq_id s = llama_seq_id(seq(id));
  std::vector<uint8_t> bytes(llama_state_seq_get_size(ctx_, s));
  bytes.resize(llama_state_seq_get_data(ctx_, bytes.data(), bytes.size(), s));
  const int KVH = config_.n_kv_heads, D = config_.head_dim, width = KVH * D;
  const auto state = parse_sequence_state(bytes, config_.n_layers, width);
  if (int(state.positions.size()) != held.length)
    throw std::runtime_error("cache: llama.cpp holds " + std::to_string(state.positions.size()) +
                             " cells of the sequence, kvcheck " + std::to_string(held.length));
  CacheSnapshot snap;
  snap.length = held.length, snap.n_kv_heads = KVH, snap.head_dim = D;
  snap.k.resize(size_t(held.length) * size_t(width) * 4);  // [n][KVH][D] f32
  snap.v.resize(snap.k.size());                            // [n][KVH][D] f32
  std::vector<float> k(static_cast<size_t>(width));        // [KVH][D] one slot
  bool moved = false;
  for (int slot = 0; slot < held.length; ++slot) {
    const int pos = held.position_of(slot);
    moved = moved || pos != slot;
    // The slot's cell: after a div several share a position; the n-th slot
    // at a position takes llama.cpp's n-th cell there.
    int nth = 0;
    for (int before = 0; before < slot; ++before) nth += held.position_of(before) == pos;
    auto cell = std::find(state.positions.begin(), state.positions.end(), pos);
    for (; nth > 0 && cell != state.positions.end(); --nth)
      cell = std::find(cell + 1, state.positions.end(), pos);
    if (cell == state.positions.end())
      throw std::runtime_error("cache: llama.cpp holds no cell at position " + std::to_string(pos));
    const size_t from = size_t(cell - state.positions.begin()) * size_t(width);
    const std::span<const float> stored(state.k[size_t(layer)].data() + from, size_t(width));
    unpermute_heads(stored, KVH, D, k);
    std::memcpy(snap.k.data() + size_t(slot) * size_t(width) * 4, k.data(), size_t(width) * 4);
    std::memcpy(snap.v.data() + size_t(slot) * size_t(width) * 4,
                state.v[size_t(layer)].data() + from, size_t(width) * 4);
    snap.positions.push_back(pos);
  }
  if (!moved) snap.positions.clear();  // slot i holds position i
  return snap;
}

}  // namespace kvcheck::llama_native
