// The in-tree CPU engine behind the C plugin ABI, so that tests and the
// harness benchmark can compare the plugin path with the engine in-tree.
// The engine's code is not linked into this module: make_cpu_engine and the
// model helpers resolve from the host executable at dlopen (the host links
// with ENABLE_EXPORTS), so both paths run the very same machine code and
// differ only by the ABI shim.
//
// Options ("&"-separated): "finish=internal_error" makes finish() fail with
// KVCHECK_ERR_INTERNAL (a plugin's own bug, not a refusal);
// "positions=off_by_one" makes cache_positions list each position + 1 (a
// shim that reports a ring's or a shifted cache's slots wrongly, its K/V
// right); "fault=NAME[,NAME]"
// turns on the engine's fault switches (engine/faults.h), which the ABI does
// not carry, so that a fault in fork or truncate can be shown caught through
// the plugin path.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/exec/exec_reply.h"
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
  bool positions_off_by_one = false;
  std::vector<BatchEntry> batch;  // [entry] of the current step
  std::vector<float> logits;      // [tokens][vocab] of the current step
  std::string text;               // the last pool_json or storage_check answer
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

struct PluginOptions {
  bool finish_fails = false;
  bool positions_off_by_one = false;
  FaultSet faults;
};

PluginOptions parse_options(const char* options, kvcheck_error* error) {
  PluginOptions out;
  std::string rest = options == nullptr ? "" : options;
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string o = rest.substr(0, amp);
    rest = amp == std::string::npos ? "" : rest.substr(amp + 1);
    if (o == "finish=internal_error") {
      out.finish_fails = true;
    } else if (o == "positions=off_by_one") {
      out.positions_off_by_one = true;
    } else if (o.rfind("fault=", 0) == 0) {
      const Result<FaultSet> faults = parse_fault_list(o.substr(6));
      if (!faults.ok()) {
        fail(error, KVCHECK_ERR_INPUT, "fault: " + faults.error());
        throw InputError(error->message);
      }
      out.faults = faults.value();
    } else {
      fail(error, KVCHECK_ERR_INPUT,
           "unknown option \"" + o +
               "\" (known: finish=internal_error, positions=off_by_one, fault=NAME)");
      throw InputError(error->message);
    }
  }
  return out;
}

const char* traits_json(const char* options, kvcheck_error* error) {
  try {
    parse_options(options, error);
  } catch (const InputError&) {
    return nullptr;
  }
  static const std::string json = [] {
    // Every operation of docs/OPERATIONS.md through the appended functions,
    // the sliding window included (cache_positions lists a ring's slots);
    // not the storage map nor fault switches, which the ABI does not carry.
    EngineTraits t = cpu_engine_traits_with_operations();
    t.identity.name = "kvcheck-cpu-plugin";
    t.operations.fault_switches = false;
    t.operations.storage_map = false;
    t.operations.prompt_logits = false;  // no create argument asks for it
    t.operations.div = false;            // the ABI does not carry div
    return traits_to_json(t).dump();
  }();
  return json.c_str();
}

// The engine from the tensors kvcheck passes, read in place: the engine
// packs them at create (its one copy) and keeps no reference. A layout (a
// Weights of empty layers, whose fields stand for the tensors) is built per
// model; a campaign changes the model on almost every case, so the walk that
// matches the tensors to its fields allocates nothing. kvcheck passes the
// tensors in the walk's order: matched by position, by name only where a name
// differs there.
std::unique_ptr<Engine> engine_from(const Config& config, const kvcheck_create_args& args,
                                    const EngineOptions& options) {
  thread_local std::optional<Config> model;
  thread_local Weights layout;  // config.n_layers empty layers
  if (!model || !(*model == config)) {
    model = config;
    layout = Weights{};
    layout.layers.resize(size_t(config.n_layers));
  }
  using FieldData = std::pair<const std::vector<float>*, std::span<const float>>;
  thread_local std::vector<FieldData> data;  // [tensor] field of layout -> its data, by field
  thread_local std::map<std::string, const kvcheck_tensor*, std::less<>> by_name;
  data.clear();
  by_name.clear();
  size_t index = 0;
  for_each_tensor(
      config, layout,
      [&](std::string_view name, std::span<const int64_t> shape, const std::vector<float>& field) {
        const kvcheck_tensor* tensor = nullptr;
        if (index < size_t(args.n_tensors) && name == args.tensors[index].name) {
          tensor = &args.tensors[index];
        } else {
          if (by_name.empty()) {
            for (int64_t i = 0; i < args.n_tensors; ++i)
              by_name[args.tensors[i].name] = &args.tensors[i];
          }
          const auto it = by_name.find(name);
          if (it == by_name.end()) throw InputError("missing tensor " + std::string(name));
          tensor = it->second;
        }
        ++index;
        int64_t wanted = 1, given = 1;
        for (const int64_t d : shape) wanted *= d;
        for (int32_t d = 0; d < tensor->rank && d < 4; ++d) given *= tensor->shape[d];
        if (tensor->rank < 1 || tensor->rank > 4 || given != wanted) {
          throw InputError("tensor " + std::string(name) + ": " + std::to_string(given) +
                           " floats where the config needs " + std::to_string(wanted));
        }
        data.push_back({&field, {tensor->data, size_t(wanted)}});
      });
  std::sort(data.begin(), data.end(),
            [](const FieldData& a, const FieldData& b) { return a.first < b.first; });
  return make_cpu_engine_reading(
      config, layout,
      [](const std::vector<float>& field) {
        const auto it = std::lower_bound(
            data.begin(), data.end(), &field,
            [](const FieldData& a, const std::vector<float>* f) { return a.first < f; });
        return it == data.end() || it->first != &field ? std::span<const float>() : it->second;
      },
      options);
}

// The config from its parsed form where the caller passes one (a kvcheck
// built with that part of the header), else from the JSON. Each path is a
// campaign's: a JSON parse per engine was most of what this plugin added to
// creating one.
Result<Config> config_of(const kvcheck_create_args& args) {
  if (args.struct_size >= offsetof(kvcheck_create_args, n_config_values) + sizeof(int64_t) &&
      args.config_values != nullptr) {
    thread_local std::vector<ConfigValue> values;  // [field], viewing args'
    values.clear();
    for (int64_t i = 0; i < args.n_config_values; ++i) {
      const kvcheck_config_value& v = args.config_values[i];
      values.push_back({v.key != nullptr ? v.key : "", v.text != nullptr ? v.text : "", v.number});
    }
    return config_from_values(values);
  }
  if (args.config_json == nullptr) return Result<Config>::failure("config_json: NULL");
  const nlohmann::json json = nlohmann::json::parse(args.config_json, nullptr, false);
  if (json.is_discarded()) return Result<Config>::failure("config_json: not valid JSON");
  return config_from_json(json);
}

kvcheck_engine* create(const kvcheck_create_args* args, kvcheck_error* error) {
  auto handle = std::make_unique<kvcheck_engine>();
  const int32_t code = guarded(error, [&] {
    const PluginOptions parsed = parse_options(args->options, error);
    handle->finish_fails = parsed.finish_fails;
    handle->positions_off_by_one = parsed.positions_off_by_one;
    const Result<Config> config = config_of(*args);
    if (!config.ok()) throw InputError(config.error());
    Result<KvDtype> dtype = parse_kv_dtype(args->kv_dtype);
    if (!dtype.ok()) throw InputError(dtype.error());
    EngineOptions options;
    options.capacity = args->capacity;
    options.max_rows = args->max_rows;
    options.kv_dtype = dtype.value();
    options.faults = parsed.faults;
    if (args->struct_size >= offsetof(kvcheck_create_args, pool_blocks) + sizeof(int32_t)) {
      options.block_size = args->block_size;
      options.pool_blocks = args->pool_blocks;
    }
    if (args->struct_size >= offsetof(kvcheck_create_args, prefix_cache) + sizeof(int32_t))
      options.prefix_cache = args->prefix_cache != 0;
    if (args->struct_size >= offsetof(kvcheck_create_args, host_blocks) + sizeof(int32_t))
      options.host_blocks = args->host_blocks;
    handle->engine = engine_from(config.value(), *args, options);
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

int32_t start_keyed(kvcheck_engine* engine, uint64_t key, int64_t* sequence, kvcheck_error* error) {
  return guarded(error, [&] { *sequence = engine->engine->start_keyed(key); });
}

int32_t offload(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->offload(sequence); });
}

int32_t save(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->save_state(sequence); });
}

int32_t restore(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->restore_state(sequence); });
}

int32_t abort_sequence(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->abort(sequence); });
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

int32_t cache(kvcheck_engine* engine, int64_t sequence, int32_t layer, float* k, float* v,
              int64_t capacity, kvcheck_error* error) {
  return guarded(error, [&] {
    const CacheSnapshot snap = engine->engine->cache(sequence, layer);
    const size_t n = size_t(snap.length) * size_t(snap.n_kv_heads) * size_t(snap.head_dim);
    if (int64_t(n) > capacity) throw std::runtime_error("cache: buffer too small");
    // Widened as the snapshot defines it (q8_0: code * its block's scale).
    const size_t D = size_t(snap.head_dim), KVH = size_t(snap.n_kv_heads);
    for (size_t i = 0; i < n; ++i) {
      const int pos = int(i / (KVH * D)), g = int(i / D % KVH), d = int(i % D);
      k[i] = snap.k_at(pos, g, d);
      v[i] = snap.v_at(pos, g, d);
    }
  });
}

int32_t cache_positions(kvcheck_engine* engine, int64_t sequence, int32_t layer, int32_t* positions,
                        int64_t capacity, int32_t* slots, int32_t* listed, kvcheck_error* error) {
  return guarded(error, [&] {
    const CacheSnapshot snap = engine->engine->cache(sequence, layer);
    if (int64_t(snap.positions.size()) > capacity)
      throw std::runtime_error("cache_positions: buffer too small");
    *slots = snap.length;
    *listed = snap.positions.empty() ? 0 : 1;
    for (size_t i = 0; i < snap.positions.size(); ++i)
      positions[i] = snap.positions[i] + (engine->positions_off_by_one ? 1 : 0);
  });
}

int32_t fork(kvcheck_engine* engine, int64_t parent, int32_t n, int64_t* child,
             kvcheck_error* error) {
  return guarded(error, [&] { *child = engine->engine->fork(parent, n); });
}

int32_t truncate(kvcheck_engine* engine, int64_t sequence, int32_t n, kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->truncate(sequence, n); });
}

int32_t erase(kvcheck_engine* engine, int64_t sequence, int32_t p0, int32_t p1,
              kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->erase(sequence, p0, p1); });
}

int32_t shift(kvcheck_engine* engine, int64_t sequence, int32_t p0, int32_t p1, int32_t delta,
              kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->shift(sequence, p0, p1, delta); });
}

const char* pool_json(kvcheck_engine* engine, kvcheck_error* error) {
  const int32_t code = guarded(
      error, [&] { engine->text = wire::encode_pool_reply(engine->engine->pool()).dump(); });
  return code == KVCHECK_OK ? engine->text.c_str() : nullptr;
}

const char* storage_check(kvcheck_engine* engine, kvcheck_error* error) {
  const int32_t code =
      guarded(error, [&] { engine->text = engine->engine->unheld_storage_check(); });
  return code == KVCHECK_OK ? engine->text.c_str() : nullptr;
}

int32_t reused(kvcheck_engine* engine, int64_t sequence, int32_t* n, kvcheck_error* error) {
  return guarded(error, [&] { *n = engine->engine->reused(sequence); });
}

int32_t flush_prefix_cache(kvcheck_engine* engine, kvcheck_error* error) {
  return guarded(error, [&] { engine->engine->flush_prefix_cache(); });
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
                                  fork,
                                  truncate,
                                  pool_json,
                                  storage_check,
                                  reused,
                                  flush_prefix_cache,
                                  erase,
                                  shift,
                                  cache_positions,
                                  abort_sequence,
                                  start_keyed,
                                  offload,
                                  save,
                                  restore};

}  // namespace

KVCHECK_TEST_EXPORT_TABLE(&kTable)
