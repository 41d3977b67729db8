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
// Prints what each shows in both modes; exit 0 when both still show.
//   kvcheck-export --family llama --out m.gguf
//   kvcheck-llama-repro m.gguf
#include <cstdio>

#include "ggml-backend.h"
#include "llama.h"

namespace {

int decode_one(llama_context* ctx, llama_pos pos, llama_seq_id seq) {
  llama_batch b = llama_batch_init(1, 0, 1);
  b.token[0] = 1, b.pos[0] = pos, b.n_seq_id[0] = 1, b.seq_id[0][0] = seq, b.logits[0] = 1;
  b.n_tokens = 1;
  const int rc = llama_decode(ctx, b);
  llama_batch_free(b);
  return rc;
}

llama_context* two_sequences(llama_model* model, bool unified) {
  llama_context_params p = llama_context_default_params();
  p.n_ctx = 512, p.n_seq_max = 2, p.kv_unified = unified, p.n_threads = p.n_threads_batch = 1;
  return llama_init_from_model(model, p);
}

// 1: seq 1's largest position after its parent's shift (0 expected).
int shared_shift(llama_model* model, bool unified) {
  llama_context* ctx = two_sequences(model, unified);
  llama_memory_t mem = llama_get_memory(ctx);
  decode_one(ctx, 0, 0);                   // seq 0 holds position 0
  llama_memory_seq_cp(mem, 0, 1, -1, -1);  // seq 1: a copy of seq 0
  llama_memory_seq_add(mem, 0, 0, 1, 1);   // seq 0's position 0 -> 1
  const int max1 = llama_memory_seq_pos_max(mem, 1);
  const int rc = decode_one(ctx, 1, 1);  // seq 1's next position
  std::printf(
      "shared shift, kv_unified %d: seq 1 holds up to %d (expected 0); "
      "llama_decode of seq 1 at position 1: %d\n",
      int(unified), max1, rc);
  llama_free(ctx);
  return max1;
}

// 2: seq 0's largest position after seq_keep(1) (-1 expected: removed).
int keep(llama_model* model, bool unified) {
  llama_context* ctx = two_sequences(model, unified);
  llama_memory_t mem = llama_get_memory(ctx);
  decode_one(ctx, 0, 0);  // seq 0 holds position 0
  decode_one(ctx, 0, 1);  // seq 1 holds position 0
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

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  ggml_backend_load_all_from_path(KVCHECK_LLAMA_LIB_DIR);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 2;
  }
  const bool shift_shown = shared_shift(model, false) == 0 && shared_shift(model, true) == 1;
  const bool keep_shown = keep(model, false) == 0 && keep(model, true) == -1;
  llama_model_free(model);
  return shift_shown && keep_shown ? 0 : 1;
}
