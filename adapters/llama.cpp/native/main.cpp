// kvcheck-llama-native: llama.cpp (the library node-llama-cpp ships, driven
// through llama.h) behind the engine protocol, for what the Node adapter's
// prebuilt addon cannot reach: the unified KV cache (docs/LLAMA_CPP.md,
// "Native driver").
//   kvcheck campaign --backend exec:'build/release/adapters/llama.cpp/native/kvcheck-llama-native
//   --unified on'
//   --unified on|off   llama_context_params::kv_unified (default off, as node-llama-cpp)
//   --erase-shift on|off  declare erase and shift (default on); with --unified on
//                      a shift after a fork moves both sequences' shared cells
//                      (docs/LLAMA_CPP.md, "Native driver"), so off runs the
//                      other properties there
//   --finish-by rm|keep  finish through llama_memory_seq_rm (default), or
//                      llama_memory_seq_keep(survivor) where one sequence survives
//   --capacity-by table|llama  who refuses a step past capacity: the
//                      SequenceTable (default) or llama.cpp's llama_decode
//                      (a unified cache with a filler sequence, no fork,
//                      no snapshot, no save: LlamaOptions::llama_refuses)
//   --save-restore on|off  declare save and restore (default off):
//                      llama_state_seq_get_data / set_data into the same seq
//                      id, as a user calls them (docs/LLAMA_CPP.md, "Save and
//                      restore")
//   --div on|off       declare div (default off): llama_memory_seq_div
//                      (docs/LLAMA_CPP.md, "Div")
//   --div-by div|add   div through llama_memory_seq_div (default), or one
//                      llama_memory_seq_add per moved position (seq_div's K
//                      rotation has the wrong sign; the same page)
// f32 K/V, flash attention off, llama family, one thread. Exit 2 on bad options.
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "backends/exec/exec_wire.h"
#include "ggml-backend.h"
#include "llama.h"
#include "llama_engine.h"
#include "model/gguf.h"
#include "model/status.h"
#include "tools/serve_loop.h"

namespace kvcheck::llama_native {
namespace {

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

// The folder's model, written as GGUF (model/gguf.cpp, the one writer) and
// loaded by llama.cpp; the file is removed once loaded.
struct LlamaModel : ServedModel {
  llama_model* model = nullptr;
  ~LlamaModel() override { llama_model_free(model); }
};

// The traits of the Node adapter's f32 mode with flash attention off
// (adapters/llama.cpp/traits.mjs, measured there; docs/LLAMA_CPP.md,
// "Traits").
EngineTraits llama_traits(const LlamaOptions& options) {
  const bool unified = options.unified || options.llama_refuses;
  EngineTraits t;
  t.identity.name = std::string("llama.cpp-native-unified-") + (unified ? "on" : "off") +
                    (options.llama_refuses ? "-capacity-by-llama" : "");
  t.identity.version = "llama.cpp v0.5.0 (node-llama-cpp 3.22.1's bundle)";
  OperationTraits& o = t.operations;
  o.multi_sequence_step = o.finish = o.reset = o.capacity_refusal = true;
  o.fork = o.truncate = true;
  o.erase = o.shift = options.erase_shift;
  o.save_restore = options.save_restore;
  // In one stream a fork's cells are shared, and seq_div moves them for
  // both sequences, as seq_add does (docs/LLAMA_CPP.md, "Native driver").
  o.div = options.div && !unified;
  o.cache_snapshot = true;  // llama_state_seq_get_data (llama_state.h)
  o.fault_switches = false;
  t.limits.families = {Family::kLlama};
  t.limits.kv_dtypes = {KvDtype::kF32};
  t.limits.min_head_dim = 2;  // RoPE rotates pairs
  t.limits.max_rows = 64;
  InvarianceTraits& i = t.invariance;  // ggml picks its matmul path by shape
  i.chunking = i.batch = i.reset = i.compaction = i.gqa_twin = Invariance::kBounded;
  i.sharing = i.rollback = Invariance::kBounded;
  i.determinism = Invariance::kBitwise;
  t.arithmetic.rope_angles_in_float = true;  // ggml-cpu rope_f32: theta *= theta_scale
  if (options.llama_refuses) {               // LlamaOptions::llama_refuses
    o.fork = o.cache_snapshot = o.save_restore = false;
  }
  return t;
}

class LlamaMaker : public EngineMaker {
 public:
  explicit LlamaMaker(LlamaOptions options) : options_(options) {}
  EngineTraits traits() override { return llama_traits(options_); }

  std::shared_ptr<ServedModel> load(const std::string& folder) override {
    auto loaded = std::make_shared<LlamaModel>();
    loaded->file = std::move(load_safetensors_file(folder + "/model.safetensors").value());
    char path[] = "/tmp/kvcheck-llama-native-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    close(fd);
    const std::string problem = save_gguf_file(path, loaded->file.config, loaded->file.weights);
    if (!problem.empty()) throw InputError(problem);
    llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = 0;
    loaded->model = llama_model_load_from_file(path, p);
    std::remove(path);
    if (loaded->model == nullptr) throw std::runtime_error("llama_model_load_from_file failed");
    return loaded;
  }

  std::unique_ptr<Engine> create(ServedModel& model, const EngineOptions& options) override {
    if (options.block_size > 0 || options.prefix_cache)
      throw InputError("paged storage and the prefix cache are not offered");
    auto& loaded = static_cast<LlamaModel&>(model);
    return std::make_unique<LlamaEngine>(loaded.model, loaded.file.config, options, options_);
  }

 private:
  LlamaOptions options_;
};

}  // namespace
}  // namespace kvcheck::llama_native

int main(int argc, char** argv) {
  kvcheck::llama_native::LlamaOptions options;
  for (int i = 1; i < argc; ++i) {
    const bool on_off = i + 1 < argc && (std::strcmp(argv[i + 1], "on") == 0 ||
                                         std::strcmp(argv[i + 1], "off") == 0);
    if (std::strcmp(argv[i], "--unified") == 0 && on_off) {
      options.unified = std::strcmp(argv[++i], "on") == 0;
    } else if (std::strcmp(argv[i], "--erase-shift") == 0 && on_off) {
      options.erase_shift = std::strcmp(argv[++i], "on") == 0;
    } else if (std::strcmp(argv[i], "--save-restore") == 0 && on_off) {
      options.save_restore = std::strcmp(argv[++i], "on") == 0;
    } else if (std::strcmp(argv[i], "--div") == 0 && on_off) {
      options.div = std::strcmp(argv[++i], "on") == 0;
    } else if (std::strcmp(argv[i], "--div-by") == 0 && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "div") == 0 || std::strcmp(argv[i + 1], "add") == 0)) {
      options.div_by_add = std::strcmp(argv[++i], "add") == 0;
    } else if (std::strcmp(argv[i], "--finish-by") == 0 && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "rm") == 0 || std::strcmp(argv[i + 1], "keep") == 0)) {
      options.finish_by_keep = std::strcmp(argv[++i], "keep") == 0;
    } else if (std::strcmp(argv[i], "--capacity-by") == 0 && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "table") == 0 || std::strcmp(argv[i + 1], "llama") == 0)) {
      options.llama_refuses = std::strcmp(argv[++i], "llama") == 0;
    } else {
      std::fprintf(stderr,
                   "kvcheck-llama-native: unknown argument \"%s\" (known: --unified on|off, "
                   "--erase-shift on|off, --save-restore on|off, --div on|off, "
                   "--div-by div|add, --finish-by rm|keep, "
                   "--capacity-by table|llama)\n",
                   argv[i]);
      return 2;
    }
  }
  const std::optional<std::chrono::microseconds> spin = kvcheck::server_spin(
      std::getenv("KVCHECK_EXEC_SPIN"), "kvcheck-llama-native: KVCHECK_EXEC_SPIN=");
  if (!spin) return 2;
  llama_log_set(kvcheck::llama_native::quiet_log, nullptr);
  ggml_backend_load_all_from_path(KVCHECK_LLAMA_LIB_DIR);
  llama_backend_init();
  kvcheck::llama_native::LlamaMaker maker(options);
  const int rc =
      kvcheck::serve_engines(maker, kvcheck::wire::kProtocolVersion, *spin, "kvcheck-llama-native");
  llama_backend_free();
  return rc;
}
