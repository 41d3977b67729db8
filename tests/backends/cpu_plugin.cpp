// The in-tree CPU engine behind the C plugin ABI, so that tests and the
// harness benchmark can compare the plugin path with the engine in-tree.
// The engine's code is not linked into this module: make_cpu_engine and the
// model helpers resolve from the host executable at dlopen (the host links
// with ENABLE_EXPORTS), so both paths run the very same machine code and
// differ only by the ABI shim.
//
// Options: "finish=internal_error" makes finish() fail with
// KVCHECK_ERR_INTERNAL (a plugin's own bug, not a refusal).
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "backends/in_tree.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/traits_json.h"
#include "kvcheck/engine_plugin.h"
#include "model/config_json.h"
#include "model/status.h"
#include "model/weights.h"
#include "tests/backends/plugin_export.h"

using namespace kvcheck;

struct kvcheck_engine {
  std::unique_ptr<Engine> engine;
  bool finish_fails = false;
  std::vector<BatchEntry> batch;  // [entry] of the current step
  std::vector<float> logits;      // [tokens][vocab] of the current step
};

namespace {

int32_t fail(kvcheck_error* error, int32_t code, const std::string& message) {
  error->code = code;
  std::snprintf(error->message, sizeof(error->message), "%s", message.c_str());
  return code;
}

int32_t code_of(EngineError::Kind kind) {
  switch (kind) {
    case EngineError::Kind::kCapacity:
      return KVCHECK_ERR_CAPACITY;
    case EngineError::Kind::kRows:
      return KVCHECK_ERR_ROWS;
    case EngineError::Kind::kUnknownSequence:
      return KVCHECK_ERR_UNKNOWN_SEQUENCE;
    case EngineError::Kind::kBadBatch:
      return KVCHECK_ERR_BAD_BATCH;
    case EngineError::Kind::kBadToken:
      return KVCHECK_ERR_BAD_TOKEN;
    case EngineError::Kind::kDevice:
      return KVCHECK_ERR_DEVICE;
  }
  return KVCHECK_ERR_INTERNAL;
}

// Runs `body` and turns what the engine throws into the ABI's error codes.
template <typename F>
int32_t guarded(kvcheck_error* error, F&& body) {
  try {
    body();
    return KVCHECK_OK;
  } catch (const EngineError& e) {
    return fail(error, code_of(e.kind()), e.what());
  } catch (const InputError& e) {
    return fail(error, KVCHECK_ERR_INPUT, e.what());
  } catch (const std::exception& e) {
    return fail(error, KVCHECK_ERR_INTERNAL, e.what());
  }
}

bool finish_fails(const char* options, kvcheck_error* error) {
  const std::string o = options == nullptr ? "" : options;
  if (o.empty()) return false;
  if (o == "finish=internal_error") return true;
  fail(error, KVCHECK_ERR_INPUT, "unknown option \"" + o + "\" (known: finish=internal_error)");
  throw InputError(error->message);
}

const char* traits_json(const char* options, kvcheck_error* error) {
  try {
    finish_fails(options, error);
  } catch (const InputError&) {
    return nullptr;
  }
  static const std::string json = [] {
    EngineTraits t = cpu_engine_traits();
    t.identity.name = "kvcheck-cpu-plugin";
    t.operations.fault_switches = false;  // the ABI carries none
    return traits_to_json(t).dump();
  }();
  return json.c_str();
}

// The weights from the tensors kvcheck passes, matched by canonical name,
// in a buffer kept per thread: the engine packs them at create and keeps no
// reference. A new model empties the last model's tensors but keeps their
// memory, so that refilling allocates only when a tensor grows (a campaign
// changes the model on almost every case). Emptied, not left: the table does
// not walk tensors the config lacks (llama's biases), and stale ones would be
// packed.
const Weights& weights_from(const Config& config, const kvcheck_create_args& args) {
  thread_local Weights weights;
  thread_local std::optional<Config> model;
  if (!model || !(*model == config)) {
    if (model) {
      for (const TensorRef& ref : tensor_table(*model, weights)) ref.data->clear();
    }
    model = config;
  }
  thread_local std::map<std::string, const kvcheck_tensor*> by_name;
  by_name.clear();
  for (int64_t i = 0; i < args.n_tensors; ++i) by_name[args.tensors[i].name] = &args.tensors[i];
  for (const TensorRef& ref : tensor_table(config, weights)) {
    const auto it = by_name.find(ref.name);
    if (it == by_name.end()) throw InputError("missing tensor " + ref.name);
    std::memcpy(ref.data->data(), it->second->data, ref.data->size() * sizeof(float));
  }
  return weights;
}

kvcheck_engine* create(const kvcheck_create_args* args, kvcheck_error* error) {
  auto handle = std::make_unique<kvcheck_engine>();
  const int32_t code = guarded(error, [&] {
    handle->finish_fails = finish_fails(args->options, error);
    Result<Config> config = config_from_json(nlohmann::json::parse(args->config_json));
    if (!config.ok()) throw InputError(config.error());
    Result<KvDtype> dtype = parse_kv_dtype(args->kv_dtype);
    if (!dtype.ok()) throw InputError(dtype.error());
    EngineOptions options;
    options.capacity = args->capacity;
    options.max_rows = args->max_rows;
    options.kv_dtype = dtype.value();
    handle->engine = make_cpu_engine(config.value(), weights_from(config.value(), *args), options);
  });
  return code == KVCHECK_OK ? handle.release() : nullptr;
}

void destroy(kvcheck_engine* engine) {
  delete engine;
}

int32_t start(kvcheck_engine* engine, int64_t* sequence, kvcheck_error* error) {
  return guarded(error, [&] { *sequence = engine->engine->start(); });
}

int32_t step(kvcheck_engine* engine, const kvcheck_batch_entry* batch, int32_t n_entries,
             float* logits, kvcheck_error* error) {
  return guarded(error, [&] {
    engine->batch.clear();
    for (int32_t i = 0; i < n_entries; ++i) {
      engine->batch.push_back({batch[i].sequence, {batch[i].tokens, size_t(batch[i].n_tokens)}});
    }
    engine->engine->step(engine->batch, engine->logits);
    std::memcpy(logits, engine->logits.data(), engine->logits.size() * sizeof(float));
  });
}

int32_t finish(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error) {
  if (engine->finish_fails) return fail(error, KVCHECK_ERR_INTERNAL, "finish: map::at");
  return guarded(error, [&] { engine->engine->finish(sequence); });
}

int32_t reset(kvcheck_engine* engine, kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->reset(); });
}

int32_t length(kvcheck_engine* engine, int64_t sequence, int32_t* n, kvcheck_error* error) {
  return guarded(error, [&] { *n = engine->engine->length(sequence); });
}

float widen(const CacheSnapshot& snap, const std::vector<uint8_t>& bytes, size_t i) {
  switch (snap.dtype) {
    case KvDtype::kBF16:
    case KvDtype::kF16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      return snap.dtype == KvDtype::kBF16 ? bf16_to_float(h) : f16_to_float(h);
    }
    case KvDtype::kF32:
      break;
  }
  float f;
  std::memcpy(&f, bytes.data() + 4 * i, 4);
  return f;
}

int32_t cache(kvcheck_engine* engine, int64_t sequence, int32_t layer, float* k, float* v,
              int64_t capacity, kvcheck_error* error) {
  return guarded(error, [&] {
    const CacheSnapshot snap = engine->engine->cache(sequence, layer);
    const size_t n = size_t(snap.length) * size_t(snap.n_kv_heads) * size_t(snap.head_dim);
    if (int64_t(n) > capacity) throw std::runtime_error("cache: buffer too small");
    for (size_t i = 0; i < n; ++i) {
      k[i] = widen(snap, snap.k, i);
      v[i] = widen(snap, snap.v, i);
    }
  });
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
                                  cache};

}  // namespace

KVCHECK_TEST_EXPORT_TABLE(&kTable)
