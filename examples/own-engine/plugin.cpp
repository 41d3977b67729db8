// The example engine behind the C plugin ABI (kvcheck/engine_plugin.h):
// --backend 'plugin:libown_engine_plugin.so[?bug=restart_positions]'.
// Needs only the C header and a JSON parser for the model config; no
// kvcheck library is linked.
#include <kvcheck/engine_plugin.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "own_engine.h"
#include "own_traits.h"

struct kvcheck_engine {
  own::Engine core;
};

namespace {

void set_error(kvcheck_error* error, int32_t code, const char* message) {
  if (error == nullptr) return;
  error->code = code;
  std::snprintf(error->message, sizeof(error->message), "%s", message);
}

// Runs `call`; any exception becomes an error code and message (none may
// cross the C boundary).
template <class F>
int32_t guarded(kvcheck_error* error, F&& call) {
  try {
    call();
    return KVCHECK_OK;
  } catch (const own::Error& e) {
    set_error(error, int32_t(e.code), e.what());
    return int32_t(e.code);
  } catch (const std::exception& e) {
    set_error(error, KVCHECK_ERR_INTERNAL, e.what());
    return KVCHECK_ERR_INTERNAL;
  }
}

// The model config's keys (kvcheck's docs/CASE_FORMAT.md); llama only.
own::Shape shape_from_json(const char* text) {
  const nlohmann::json c = nlohmann::json::parse(text);
  if (c.at("family") != "llama" || c.value("qkv_bias", false)) {
    throw own::Error(own::ErrorCode::kInput, "own-engine: only the llama family");
  }
  return own::Shape{c.at("n_layers"),   c.at("d_model"),    c.at("n_heads"),
                    c.at("n_kv_heads"), c.at("head_dim"),   c.at("d_ff"),
                    c.at("vocab"),      c.at("rope_theta"), c.at("norm_eps")};
}

const char* traits_json(const char* options, kvcheck_error* error) {
  const int32_t code = guarded(error, [&] { own::parse_options(options ? options : ""); });
  return code == KVCHECK_OK ? own::kTraitsJson : nullptr;
}

kvcheck_engine* create(const kvcheck_create_args* args, kvcheck_error* error) {
  kvcheck_engine* engine = nullptr;
  guarded(error, [&] {
    if (std::string(args->kv_dtype) != "f32") {
      throw own::Error(own::ErrorCode::kInput, "own-engine: kv_dtype must be f32");
    }
    const own::TensorLookup lookup = [&](const std::string& name, size_t elements) {
      for (int64_t i = 0; i < args->n_tensors; ++i) {
        const kvcheck_tensor& t = args->tensors[i];
        if (name != t.name) continue;
        size_t size = 1;
        for (int32_t d = 0; d < t.rank; ++d) size *= size_t(t.shape[d]);
        if (size == elements) return t.data;
      }
      throw own::Error(own::ErrorCode::kInput,
                       "own-engine: tensor " + name + " missing or misshapen");
    };
    engine = new kvcheck_engine{
        own::Engine(shape_from_json(args->config_json), lookup, args->capacity, args->max_rows,
                    own::parse_options(args->options ? args->options : ""))};
  });
  return engine;
}

void destroy(kvcheck_engine* engine) {
  delete engine;
}

int32_t start(kvcheck_engine* engine, int64_t* sequence, kvcheck_error* error) {
  return guarded(error, [&] { *sequence = engine->core.start(); });
}

int32_t step(kvcheck_engine* engine, const kvcheck_batch_entry* batch, int32_t n_entries,
             float* logits, kvcheck_error* error) {
  return guarded(error, [&] {
    std::vector<own::Chunk> chunks;  // [entry]
    for (int32_t i = 0; i < n_entries; ++i) {
      chunks.push_back({batch[i].sequence, batch[i].tokens, batch[i].n_tokens});
    }
    engine->core.step(chunks, logits);
  });
}

int32_t finish(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error) {
  return guarded(error, [&] { engine->core.finish(sequence); });
}

int32_t reset(kvcheck_engine* engine, kvcheck_error* error) {
  return guarded(error, [&] { engine->core.reset(); });
}

int32_t length(kvcheck_engine* engine, int64_t sequence, int32_t* n, kvcheck_error* error) {
  return guarded(error, [&] { *n = engine->core.length(sequence); });
}

int32_t cache(kvcheck_engine* engine, int64_t sequence, int32_t layer, float* k, float* v,
              int64_t capacity, kvcheck_error* error) {
  return guarded(error, [&] {
    const std::vector<float>& keys = engine->core.keys(sequence, layer);
    const std::vector<float>& values = engine->core.values(sequence, layer);
    if (int64_t(keys.size()) > capacity) {
      throw own::Error(own::ErrorCode::kBadBatch, "cache: buffer too small");
    }
    std::copy(keys.begin(), keys.end(), k);
    std::copy(values.begin(), values.end(), v);
  });
}

int32_t save(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error) {
  return guarded(error, [&] { engine->core.save(sequence); });
}

int32_t restore(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error) {
  return guarded(error, [&] { engine->core.restore(sequence); });
}

const kvcheck_plugin_v1 kTable = {KVCHECK_PLUGIN_ABI_VERSION,
                                  sizeof(kvcheck_plugin_v1),
                                  traits_json,
                                  create,
                                  destroy,
                                  start,
                                  step,
                                  finish,
                                  reset,
                                  length,
                                  cache,
                                  nullptr,  // fork: not offered (traits: false)
                                  nullptr,  // truncate
                                  nullptr,  // pool_json
                                  nullptr,  // storage_check
                                  nullptr,  // reused: no prefix cache
                                  nullptr,  // flush_prefix_cache
                                  nullptr,  // erase
                                  nullptr,  // shift
                                  nullptr,  // cache_positions: slot i holds position i
                                  nullptr,  // abort: its finish
                                  nullptr,  // start_keyed: no cache keys
                                  nullptr,  // offload: no host tier
                                  save,     // ABI version 3
                                  restore};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvcheck_plugin_v1* kvcheck_plugin_entry_v1(
    void) {
  return &kTable;
}
