// llama.h alone: docs/findings/llama_cpp_state_after_fork_stale.md. With
// separate streams (kv_unified false, node-llama-cpp's setting) a
// llama_memory_seq_cp into another stream queues the buffer copy, and a
// llama_memory_seq_add queues the K rotation, for the next llama_decode;
// llama_state_seq_get_data in between reads the cells' new positions with
// the old buffers. Each variant reads the state twice, before and after a
// decode in a spare sequence (which runs the queued update and touches no
// other stream), restores each into a cleared sequence and decodes the next
// token there: the state read after the update continues the sequence, the
// one read before does not.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "repro.h"

namespace kvcheck_repro {

namespace {

constexpr llama_seq_id kSubject = 0, kRestored = 1, kSpare = 2, kChild = 3;
constexpr int kSequences = 4;

std::vector<uint8_t> state_of(llama_context* ctx, llama_seq_id seq) {
  std::vector<uint8_t> state(llama_state_seq_get_size(ctx, seq));
  state.resize(llama_state_seq_get_data(ctx, state.data(), state.size(), seq));
  return state;
}

// The logits of `token` at `pos` decoded in a sequence (its last row).
std::vector<float> next_logits(llama_context* ctx, llama_token token, llama_pos pos,
                               llama_seq_id seq) {
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
  if (decode(ctx, {token}, pos, seq) != 0) return {};
  const float* row = llama_get_logits_ith(ctx, -1);
  return std::vector<float>(row, row + n_vocab);
}

// max |a - b|, infinity where either is missing or the sizes differ.
double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.empty() || a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

// The state restored into kRestored (cleared first), then the next token.
std::vector<float> restored_next(llama_context* ctx, const std::vector<uint8_t>& state,
                                 llama_token token, llama_pos pos) {
  llama_memory_seq_rm(llama_get_memory(ctx), kRestored, -1, -1);
  if (llama_state_seq_set_data(ctx, state.data(), state.size(), kRestored) == 0) return {};
  return next_logits(ctx, token, pos, kRestored);
}

// From a sequence `seq` with a queued update: the state before and after a
// spare decode, each restored into kRestored and continued with `token` at
// `pos`. Prints how far the stale state's logits are from the updated
// state's (the same cells in the same order) and how far the updated
// state's are from `seq` continued itself (0 where seq's cells keep their
// order; a context shift's next token takes the cell the erase freed,
// which changes ggml's summation order). True while the first is large and
// the second is not.
bool compare_states(llama_context* ctx, llama_seq_id seq, llama_token token, llama_pos pos,
                    const char* what) {
  const std::vector<uint8_t> stale = state_of(ctx, seq);
  decode(ctx, {1}, 0, kSpare);  // runs the queued update first
  llama_memory_seq_rm(llama_get_memory(ctx), kSpare, -1, -1);
  const std::vector<uint8_t> updated = state_of(ctx, seq);
  const std::vector<float> own = next_logits(ctx, token, pos, seq);
  const std::vector<float> right = restored_next(ctx, updated, token, pos);
  const double off = largest_difference(restored_next(ctx, stale, token, pos), right);
  const double drift = largest_difference(right, own);
  std::printf(
      "%s: next token's logits, the state read before the update restored vs the state read "
      "after a spare decode restored: max |difference| %.6g; the latter vs the sequence itself: "
      "%.6g\n",
      what, off, drift);
  return off > 1e-2 && drift <= 1e-3;
}

}  // namespace

// A fork: seq 0 holds tokens 5 6, seq_cp into seq 3's stream; seq 3's state
// read at once holds positions 0, 1 and the stream's old buffers (zeros).
bool stale_after_fork_shows(llama_model* model) {
  llama_context* ctx = context_of(model, kSequences, false);
  decode(ctx, {5, 6}, 0, kSubject);
  llama_memory_seq_cp(llama_get_memory(ctx), kSubject, kChild, -1, -1);
  const bool shown = compare_states(ctx, kChild, 7, 2, "stale after fork (seq_cp 0 -> 3)");
  llama_free(ctx);
  return shown;
}

// A context shift: tokens 5 6 7 8, seq_rm of position 0, seq_add of [1, 4)
// by -1; the state read at once has positions 0..2 and K still rotated
// for 1..3.
bool stale_after_shift_shows(llama_model* model) {
  llama_context* ctx = context_of(model, kSequences, false);
  llama_memory_t mem = llama_get_memory(ctx);
  decode(ctx, {5, 6, 7, 8}, 0, kSubject);
  llama_memory_seq_rm(mem, kSubject, 0, 1);
  llama_memory_seq_add(mem, kSubject, 1, 4, -1);
  const bool shown =
      compare_states(ctx, kSubject, 9, 3, "stale after shift (seq_rm [0, 1), seq_add [1, 4) -1)");
  llama_free(ctx);
  return shown;
}

}  // namespace kvcheck_repro
