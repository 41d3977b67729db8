// llama.cpp's KV cache as a kvcheck Engine, through llama.h alone: the
// native driver (docs/LLAMA_CPP.md, "Native driver") reaches what
// node-llama-cpp's prebuilt addon cannot, its unified cache above all
// (the addon hard-codes kv_unified = false).
#pragma once

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/sequence_table.h"
#include "model/config.h"

struct llama_model;
struct llama_context;

namespace kvcheck::llama_native {

struct LlamaOptions {
  bool unified = false;       // llama_context_params::kv_unified: one KV stream for every sequence
  bool erase_shift = true;    // declare erase and shift (off: traits leave them out)
  bool save_restore = false;  // declare save and restore (llama_state_seq_get/set_data)
  bool div = false;           // declare div (llama_memory_seq_div)
  // --div-by add: div as one llama_memory_seq_add per moved position
  // instead of seq_div, whose K rotation has the wrong sign
  // (docs/findings/llama_cpp_seq_div_rotates_k_backwards.md)
  bool div_by_add = false;
  // finish through llama_memory_seq_keep(survivor) where exactly one
  // sequence survives it, else seq_rm: how seq_keep is reached with the
  // protocol's operations (docs/LLAMA_CPP.md, "Native driver")
  bool finish_by_keep = false;
  // --capacity-by llama: llama.cpp refuses a step past capacity itself. One
  // unified stream of n_ctx cells (rows x capacity + 1, rounded up to 256);
  // before a step a filler sequence takes every cell but, summed over the
  // step's entries, min(tokens, capacity - held) (the cells each entry may
  // still fill), so llama_decode finds no slot (return 1) exactly where
  // some entry passes kvcheck's capacity, for a step of one sequence or of
  // several; that return is the `capacity` refusal. No fork (in a
  // unified stream a copy shares its parent's cells, which the count would
  // miss), no snapshot (its spare decode needs a cell).
  bool llama_refuses = false;
};

// Every refusal is decided by the shared SequenceTable (engine/sequence_table.h)
// before llama.cpp sees the call, so a refused call changes nothing (but
// with llama_refuses llama_decode refuses a step past capacity); the
// table also holds each sequence's cells (positions, slot order), which the
// llama.cpp calls below are derived from.
//   step      one llama_batch of every entry, at each sequence's next position
//   finish    llama_memory_seq_rm(seq, -1, -1), or with finish_by_keep and
//             one survivor llama_memory_seq_keep(survivor); the id is reused
//   reset     llama_memory_clear(mem, true)
//   fork      llama_memory_seq_cp(parent, child, -1, -1), then seq_rm of the
//             positions of the parent's slots n..
//   truncate  seq_rm of the positions of the last n cells
//   erase     seq_rm(seq, p0, p1); shift: seq_add(seq, p0, p1, delta);
//             div: seq_div(seq, p0, p1, d), or with div_by_add, in
//             ascending order, seq_add(seq, p, p + 1, p / d - p) for each
//             held p in [p0, p1) (llama.cpp lets cells share a position)
//   cache     llama_state_seq_get_data, read by llama_state.h (f32), K
//             un-permuted to kvcheck's layout, in the table's slot order
//             (cells sharing a position, after a div, in llama.cpp's cell
//             order)
//   save      llama_state_seq_get_data of the sequence, as a user calls it
//             (no decode first: pending copies and shifts stay pending), the
//             bytes kept by the table with the cells; restore:
//             llama_state_seq_set_data into the same seq id
class LlamaEngine final : public Engine {
 public:
  LlamaEngine(llama_model* model, const Config& config, const EngineOptions& options,
              LlamaOptions llama);
  ~LlamaEngine() override;
  LlamaEngine(const LlamaEngine&) = delete;
  LlamaEngine& operator=(const LlamaEngine&) = delete;

  const Config& config() const override { return config_; }
  const EngineOptions& options() const override { return options_; }
  std::string name() const override;

  SequenceId start() override;
  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override;
  void finish(SequenceId sequence) override;
  void reset() override;
  SequenceId fork(SequenceId parent, int n) override;
  void truncate(SequenceId sequence, int n) override;
  void erase(SequenceId sequence, int p0, int p1) override;
  void shift(SequenceId sequence, int p0, int p1, int delta) override;
  void div(SequenceId sequence, int p0, int p1, int d) override;
  void save_state(SequenceId sequence) override;
  void restore_state(SequenceId sequence) override;
  int length(SequenceId sequence) const override;
  CacheSnapshot cache(SequenceId sequence, int layer) const override;
  MemoryReport memory() const override { return {}; }

 private:
  int seq(SequenceId id) const;  // llama.cpp's seq id of a running sequence
  // seq_rm of `positions` (any order) from llama seq `s`, as runs [p0, p1).
  void remove_positions(int s, std::vector<int> positions);
  // The positions of slots [from, to) of a running sequence.
  std::vector<int> slot_positions(SequenceId id, int from, int to) const;
  // llama.cpp applies a fork's stream copy and a K shift only at the next
  // llama_decode, and its saved state holds the buffers as they are
  // (docs/findings/llama_cpp_state_after_fork_stale.md): one token decoded
  // in the spare sequence, then removed, runs those updates.
  void apply_pending_updates() const;
  // --capacity-by llama (LlamaOptions): the filler sized so that `free`
  // cells are left, and the room a step gets (or its refusal).
  void leave_free(int free);
  void leave_room_for(std::span<const BatchEntry> batch);

  Config config_;
  EngineOptions options_;
  LlamaOptions llama_;
  SequenceTable table_;
  llama_context* ctx_ = nullptr;
  std::vector<SequenceId> owner_;  // [llama seq id] the kvcheck sequence holding it, or -1
  // llama seq id max_rows: the spare of apply_pending_updates
  mutable bool pending_ = false;  // a call since the last llama_decode may have queued updates
  int filler_ = 0;                // --capacity-by llama: the filler's cells, positions 0..filler_-1
};

}  // namespace kvcheck::llama_native
