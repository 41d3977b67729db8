// kvcheck-llama-repro: llama.cpp's findings through llama.h alone (repro.h
// lists them). Loads the model, runs each, exit 0 when every one still
// shows, 1 when one no longer does (llama.cpp changed), 2 on bad input.
//   kvcheck-export --family llama --out m.gguf
//   kvcheck-llama-repro m.gguf
#include <cstdio>

#include "ggml-backend.h"
#include "repro.h"

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
  using namespace kvcheck_repro;
  const bool shift = shared_shift_shows(model);
  const bool keep = keep_shows(model);
  const bool fork = stale_after_fork_shows(model);
  const bool pending = stale_after_shift_shows(model);
  llama_model_free(model);
  std::printf("still shown: shared shift %d, keep %d, stale after fork %d, stale after shift %d\n",
              int(shift), int(keep), int(fork), int(pending));
  return shift && keep && fork && pending ? 0 : 1;
}
