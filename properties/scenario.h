// A Scenario is everything needed to replay one check: the model (config and
// weight seed), the engine options that shape the cache, the sequences with
// every token fixed in advance (teacher forcing, so a near-tie argmax can never
// fork engine and oracle), and the schedule of engine calls. A sequence's
// tokens are its feed stream: what its steps feed, in order; what it holds
// (its content) follows from the calls: a fork child starts with its parent's
// first n tokens, a truncation drops the last n (docs/OPERATIONS.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace kvcheck {

// One entry of a step: `length` next tokens of sequence `sequence`.
struct ChunkSpec {
  int sequence = 0;  // index into Scenario::sequences
  int length = 0;

  bool operator==(const ChunkSpec&) const = default;
};

struct Call {
  enum class Kind : uint8_t {
    kStart,
    kStep,
    kFinish,
    kReset,
    kFork,
    kTruncate,
    kFlush,
    kErase,
    kShift,
    kVerify,
    kAbort,
    kOffload,
    kSave,
    kRestore,
    kDiv
  };
  Kind kind = Kind::kStep;
  int sequence =
      0;  // kStart, kFinish, kTruncate, kAbort, kOffload, kSave, kRestore; kFork: the child
  std::vector<ChunkSpec> chunks;  // kStep: the batch, in order
  int parent = 0;                 // kFork: the sequence forked from
  int count = 0;                  // kFork: parent tokens the child starts with;
                                  // kTruncate: tokens forgotten; kVerify: draft tokens
  int p0 = 0, p1 = 0;             // kErase, kShift, kDiv: the positions [p0, p1)
  int delta = 0;                  // kShift: added to those positions
  int accepted = 0;               // kVerify: draft tokens kept (the rest roll back)
  int divisor = 0;                // kDiv: those positions become position / divisor

  static Call start(int s) { return {Kind::kStart, s, {}}; }
  static Call step(std::vector<ChunkSpec> c) { return {Kind::kStep, 0, std::move(c)}; }
  static Call finish(int s) { return {Kind::kFinish, s, {}}; }
  static Call reset() { return {Kind::kReset, 0, {}}; }
  static Call fork(int child, int parent, int n) { return {Kind::kFork, child, {}, parent, n}; }
  static Call truncate(int s, int n) { return {Kind::kTruncate, s, {}, 0, n}; }
  static Call flush() { return {Kind::kFlush, 0, {}}; }  // Engine::flush_prefix_cache
  static Call erase(int s, int p0, int p1) { return {Kind::kErase, s, {}, 0, 0, p0, p1}; }
  static Call shift(int s, int p0, int p1, int delta) {
    return {Kind::kShift, s, {}, 0, 0, p0, p1, delta};
  }
  static Call abort(int s) { return {Kind::kAbort, s, {}}; }      // Engine::abort
  static Call offload(int s) { return {Kind::kOffload, s, {}}; }  // Engine::offload
  static Call save(int s) { return {Kind::kSave, s, {}}; }        // Engine::save_state
  static Call restore(int s) { return {Kind::kRestore, s, {}}; }  // Engine::restore_state
  static Call div(int s, int p0, int p1, int d) {                 // Engine::div
    return {Kind::kDiv, s, {}, 0, 0, p0, p1, 0, 0, d};
  }
  static Call verify(int s, int drafts, int accepted) {
    return {Kind::kVerify, s, {}, 0, drafts, 0, 0, 0, accepted};
  }

  // The call as a case file's schedule line writes it ("step s0:3 s1:1"),
  // which Scenario::to_text numbers too.
  std::string to_text() const;

  bool operator==(const Call&) const = default;
};

struct Scenario {
  Config config;
  uint64_t weight_seed = 1;
  int capacity = 64;  // positions per sequence
  int max_rows = 4;   // sequences alive at once
  KvDtype kv_dtype = KvDtype::kF32;
  int block_size = 0;         // 0: contiguous storage; 1..32: paged, blocks of this many slots
  int pool_blocks = 0;        // paged: blocks in the pool; 0: the engine's default (never runs dry)
  bool prefix_cache = false;  // paged: reuse cached blocks of a prompt's leading tokens
  bool prompt_logits = false;  // prefix cache: a hit's reused rows carry logits (checked too)
  std::vector<std::vector<int32_t>> sequences;  // [sequence][token], fed in order
  // [sequence] its cache key (a cache salt, a LoRA adapter id; 0 or absent:
  // none), given to Engine::start_keyed; prefix blocks are shared only
  // within one key. A fork's child has its parent's (its own entry is 0).
  std::vector<uint32_t> cache_keys;
  std::vector<Call> calls;
  // A user's checkpoint (--model): its weights replace init_weights(config,
  // weight_seed), and `config` must be its config. Null for seeded models.
  std::shared_ptr<const Checkpoint> model;

  bool operator==(const Scenario&) const = default;

  // Engine options for this scenario (faults off; the caller adds them).
  EngineOptions engine_options() const;

  // The cache key sequence s starts with (0: none).
  uint32_t cache_key(int s) const {
    return size_t(s) < cache_keys.size() ? cache_keys[size_t(s)] : 0;
  }

  // Shrinking measure: layers + query heads + sequences + tokens fed + calls
  // (steps, finishes, resets, forks, truncations; a start counts through its
  // sequence).
  int size() const;

  // Empty when the scenario is well formed: every sequence starts (or is
  // forked) once before it is fed, is fed, forked from or truncated only
  // while running, never past its tokens or the capacity, a fork takes at
  // most its parent's length and a truncation at most the sequence's, at
  // most max_rows run at once, a flush needs the prefix cache and the prefix
  // cache paged storage, and the config validates.
  // Otherwise one message naming the call and what is wrong.
  std::string validate() const;

  // Readable multi-line text form (RapidCheck's showValue uses it too).
  std::string to_text() const;
};

// Context shift on the positions a sequence's cells hold, in slot order
// (docs/OPERATIONS.md, "Erase and shift"); the one definition validate(),
// plan_schedule and the runner share.
// Where the next fed token goes: the largest held position + 1, 0 when empty.
int next_position(const std::vector<int32_t>& cells);
// Removes the cells holding positions [p0, p1); returns how many.
int erase_cells(std::vector<int32_t>& cells, int p0, int p1);
// Adds delta to the positions in [p0, p1); "" on success, else why the
// engine must refuse it (a position leaving [0, max_pos) or a moved cell
// onto a position a cell outside the range holds), and `cells` is unchanged.
// Cells that shared a position before (after a div) may keep sharing it.
std::string shift_cells(std::vector<int32_t>& cells, int p0, int p1, int delta, int max_pos);
// Divides the positions in [p0, p1) by d >= 1, rounding down (llama.cpp's
// llama_memory_seq_div); cells may come to share a position.
void div_cells(std::vector<int32_t>& cells, int p0, int p1, int d);
// "" when keeping the first `keep` cells (a truncation, a fork) drops no
// cell that shares its position with a kept one, else why not: cells on one
// position are addressed together (docs/OPERATIONS.md, "Div").
std::string cut_keeps_shared_positions(const std::vector<int32_t>& cells, int keep);

// The weights a scenario runs: its checkpoint's, else init_weights(config,
// weight_seed), computed once per thread for the most recent (config, seed)
// since the drivers check many scenarios of one model in a row.
std::shared_ptr<const Weights> scenario_weights(const Scenario& scenario);

}  // namespace kvcheck
