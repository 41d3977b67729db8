// llama.h alone: in a unified KV cache (kv_unified = true) a sequence copied
// with llama_memory_seq_cp shares its parent's cells, and
// llama_memory_seq_add of the parent moves those cells for both, so the
// copy's next position is refused (docs/LLAMA_CPP.md, "Native driver").
// With kv_unified = false the copy has a stream of its own and keeps its
// position. Prints both; exit 0 when the unified cache moved the copy.
//   kvcheck-export --family llama --out m.gguf
//   kvcheck-llama-repro-unified-shift m.gguf
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

// Returns seq 1's largest position after the parent's shift (0 expected).
int run(llama_model* model, bool unified) {
  llama_context_params p = llama_context_default_params();
  p.n_ctx = 512, p.n_seq_max = 2, p.kv_unified = unified, p.n_threads = p.n_threads_batch = 1;
  llama_context* ctx = llama_init_from_model(model, p);
  llama_memory_t mem = llama_get_memory(ctx);
  decode_one(ctx, 0, 0);                   // seq 0 holds position 0
  llama_memory_seq_cp(mem, 0, 1, -1, -1);  // seq 1: a copy of seq 0
  llama_memory_seq_add(mem, 0, 0, 1, 1);   // seq 0's position 0 -> 1
  const int max1 = llama_memory_seq_pos_max(mem, 1);
  const int rc = decode_one(ctx, 1, 1);  // seq 1's next position
  std::printf(
      "kv_unified %d: seq 0 holds %d..%d, seq 1 holds %d..%d (expected 0..0); "
      "llama_decode of seq 1 at position 1: %d\n",
      int(unified), llama_memory_seq_pos_min(mem, 0), llama_memory_seq_pos_max(mem, 0),
      llama_memory_seq_pos_min(mem, 1), max1, rc);
  llama_free(ctx);
  return max1;
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
  const int separate = run(model, false), unified = run(model, true);
  llama_model_free(model);
  return separate == 0 && unified == 1 ? 0 : 1;
}
