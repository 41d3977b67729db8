// llama.h alone: two llama_memory_* calls whose effect depends on
// kv_unified, against llama.h's comments (docs/LLAMA_CPP.md, "Native
// driver"); the native driver's corpus cases show each through kvcheck.
//  1. shared shift: in a unified cache a sequence copied with
//     llama_memory_seq_cp shares its parent's cells, and llama_memory_seq_add
//     of the parent moves those cells for both, so the copy's next position
//     is refused. With separate streams the copy keeps its position.
//  2. keep: with separate streams (kv_unified false) llama_memory_seq_keep(s)
//     clears only s's own stream; another sequence keeps its cells ("Removes
//     all tokens that do not belong to the specified sequence" does not hold).
// Each runs in both modes and prints what it shows.
#include <cstdio>

#include "repro.h"

namespace kvcheck_repro {

llama_context* context_of(llama_model* model, int n_seq, bool unified) {
  llama_context_params p = llama_context_default_params();
  p.n_ctx = 256 * uint32_t(n_seq), p.n_seq_max = uint32_t(n_seq), p.kv_unified = unified;
  p.n_threads = p.n_threads_batch = 1;
  return llama_init_from_model(model, p);
}

int decode(llama_context* ctx, const std::vector<llama_token>& tokens, llama_pos first,
           llama_seq_id seq) {
  const int32_t n = int32_t(tokens.size());
  llama_batch b = llama_batch_init(n, 0, 1);
  for (int32_t i = 0; i < n; ++i) {
    b.token[i] = tokens[size_t(i)], b.pos[i] = first + i, b.n_seq_id[i] = 1;
    b.seq_id[i][0] = seq, b.logits[i] = i + 1 == n;
  }
  b.n_tokens = n;
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  return rc;
}

namespace {

// 1: seq 1's largest position after its parent's shift (0 expected).
int shared_shift(llama_model* model, bool unified) {
  llama_context* ctx = context_of(model, 2, unified);
  llama_memory_t mem = llama_get_memory(ctx);
  decode(ctx, {1}, 0, 0);                  // seq 0 holds position 0
  llama_memory_seq_cp(mem, 0, 1, -1, -1);  // seq 1: a copy of seq 0
  llama_memory_seq_add(mem, 0, 0, 1, 1);   // seq 0's position 0 -> 1
  const int max1 = llama_memory_seq_pos_max(mem, 1);
  const int rc = decode(ctx, {1}, 1, 1);  // seq 1's next position
  std::printf(
      "shared shift, kv_unified %d: seq 1 holds up to %d (expected 0); "
      "llama_decode of seq 1 at position 1: %d\n",
      int(unified), max1, rc);
  llama_free(ctx);
  return max1;
}

// 2: seq 0's largest position after seq_keep(1) (-1 expected: removed).
int keep(llama_model* model, bool unified) {
  llama_context* ctx = context_of(model, 2, unified);
  llama_memory_t mem = llama_get_memory(ctx);
  decode(ctx, {1}, 0, 0);  // seq 0 holds position 0
  decode(ctx, {1}, 0, 1);  // seq 1 holds position 0
  llama_memory_seq_keep(mem, 1);
  const int max0 = llama_memory_seq_pos_max(mem, 0);
  std::printf(
      "keep, kv_unified %d: after llama_memory_seq_keep(1) seq 0 holds up to %d "
      "(expected -1)\n",
      int(unified), max0);
  llama_free(ctx);
  return max0;
}

}  // namespace

bool shared_shift_shows(llama_model* model) {
  return shared_shift(model, false) == 0 && shared_shift(model, true) == 1;
}

bool keep_shows(llama_model* model) {
  return keep(model, false) == 0 && keep(model, true) == -1;
}

}  // namespace kvcheck_repro
