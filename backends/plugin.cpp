#include "backends/plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "backends/exec/exec_reply.h"
#include "engine/traits_json.h"
#include "kvcheck/engine_plugin.h"
#include "model/config_json.h"
#include "model/status.h"

namespace kvcheck {

namespace {

// The library stays loaded for the life of the process: engines made from it
// may outlive any one backend object, and unloading buys nothing here.
struct Library {
  std::string path;
  // The plugin's table, copied up to its struct_size and zero past it: the
  // functions a shorter (older) table lacks read as NULL, never past its end.
  kvcheck_plugin_v1 table{};
};

EngineError::Kind kind_of(int32_t code) {
  switch (code) {
    case KVCHECK_ERR_CAPACITY:
      return EngineError::Kind::kCapacity;
    case KVCHECK_ERR_ROWS:
      return EngineError::Kind::kRows;
    case KVCHECK_ERR_UNKNOWN_SEQUENCE:
      return EngineError::Kind::kUnknownSequence;
    case KVCHECK_ERR_BAD_TOKEN:
      return EngineError::Kind::kBadToken;
    case KVCHECK_ERR_DEVICE:
      return EngineError::Kind::kDevice;
    default:
      return EngineError::Kind::kBadBatch;
  }
}

std::string message_of(const kvcheck_error& e) {
  return std::string(e.message, strnlen(e.message, sizeof(e.message)));
}

// A plugin's error as the exception the Engine interface uses. Codes
// outside the table are the plugin's own failure, not a refusal.
[[noreturn]] void throw_plugin_error(const std::string& call, int32_t code,
                                     const kvcheck_error& e) {
  const std::string what = "plugin " + call + ": " + message_of(e);
  if (code == KVCHECK_ERR_INTERNAL || code < 0 || code > KVCHECK_ERR_INTERNAL) {
    throw std::runtime_error(what + " (code " + std::to_string(code) + ")");
  }
  if (code == KVCHECK_ERR_INPUT) throw InputError(what);
  throw EngineError(kind_of(code), what);
}

void check(const std::string& call, int32_t code, const kvcheck_error& e) {
  if (code != KVCHECK_OK) throw_plugin_error(call, code, e);
}

class PluginEngine final : public Engine {
 public:
  PluginEngine(std::shared_ptr<const Library> library, kvcheck_engine* handle, const Config& config,
               const EngineOptions& options, std::string name)
      : library_(std::move(library)),
        handle_(handle),
        config_(config),
        options_(options),
        name_(std::move(name)) {}
  ~PluginEngine() override { table().destroy(handle_); }

  const Config& config() const override { return config_; }
  const EngineOptions& options() const override { return options_; }
  std::string name() const override { return name_; }

  SequenceId start() override {
    kvcheck_error e{};
    int64_t id = 0;
    check("start", table().start(handle_, &id, &e), e);
    return id;
  }

  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
    entries_.clear();
    size_t tokens = 0;
    for (const BatchEntry& b : batch) {
      entries_.push_back({b.sequence, b.tokens.data(), static_cast<int32_t>(b.tokens.size())});
      tokens += b.tokens.size();
    }
    // The plugin writes every element; resize, not assign, so the runner's
    // reused buffer is not zero-filled on every step for nothing.
    logits.resize(tokens * size_t(config_.vocab));
    kvcheck_error e{};
    check("step",
          table().step(handle_, entries_.data(), int32_t(entries_.size()), logits.data(), &e), e);
  }

  void finish(SequenceId sequence) override {
    kvcheck_error e{};
    if (table().finish == nullptr) throw std::runtime_error("plugin has no finish operation");
    check("finish", table().finish(handle_, sequence, &e), e);
  }

  SequenceId start_keyed(uint64_t cache_key) override {
    if (cache_key == 0 || table().start_keyed == nullptr) return Engine::start_keyed(cache_key);
    kvcheck_error e{};
    int64_t sequence = 0;
    check("start_keyed", table().start_keyed(handle_, cache_key, &sequence, &e), e);
    return sequence;
  }

  // NULL (or an older table): the plugin's abort is its finish.
  void abort(SequenceId sequence) override {
    if (table().abort == nullptr) return finish(sequence);
    kvcheck_error e{};
    check("abort", table().abort(handle_, sequence, &e), e);
  }

  void reset() override {
    kvcheck_error e{};
    if (table().reset == nullptr) throw std::runtime_error("plugin has no reset operation");
    check("reset", table().reset(handle_, &e), e);
  }

  int length(SequenceId sequence) const override {
    kvcheck_error e{};
    int32_t n = 0;
    check("length", table().length(handle_, sequence, &n, &e), e);
    return n;
  }

  CacheSnapshot cache(SequenceId sequence, int layer) const override {
    if (table().cache == nullptr) throw std::runtime_error("plugin has no cache operation");
    CacheSnapshot snap;
    snap.dtype = KvDtype::kF32;
    snap.n_kv_heads = config_.n_kv_heads;
    snap.head_dim = config_.head_dim;
    if (table().cache_positions != nullptr)
      slots(sequence, layer, snap);
    else
      snap.length = length(sequence);
    const size_t floats = size_t(snap.length) * size_t(config_.kv_width());
    snap.k.assign(floats * 4, 0);
    snap.v.assign(floats * 4, 0);
    kvcheck_error e{};
    check("cache",
          table().cache(handle_, sequence, layer, reinterpret_cast<float*>(snap.k.data()),
                        reinterpret_cast<float*>(snap.v.data()), int64_t(floats), &e),
          e);
    return snap;
  }

  // Declared only where the functions are present (check_declared_operations).
  SequenceId fork(SequenceId parent, int n) override {
    if (table().fork == nullptr) return Engine::fork(parent, n);
    kvcheck_error e{};
    int64_t child = 0;
    check("fork", table().fork(handle_, parent, int32_t(n), &child, &e), e);
    return child;
  }

  void truncate(SequenceId sequence, int n) override {
    if (table().truncate == nullptr) return Engine::truncate(sequence, n);
    kvcheck_error e{};
    check("truncate", table().truncate(handle_, sequence, int32_t(n), &e), e);
  }

  void erase(SequenceId sequence, int p0, int p1) override {
    if (table().erase == nullptr) return Engine::erase(sequence, p0, p1);
    kvcheck_error e{};
    check("erase", table().erase(handle_, sequence, int32_t(p0), int32_t(p1), &e), e);
  }

  void shift(SequenceId sequence, int p0, int p1, int delta) override {
    if (table().shift == nullptr) return Engine::shift(sequence, p0, p1, delta);
    kvcheck_error e{};
    check("shift", table().shift(handle_, sequence, int32_t(p0), int32_t(p1), int32_t(delta), &e),
          e);
  }

  // The same JSON as the engine protocol's pool reply, parsed by the same
  // parser (backends/exec/exec_reply.h).
  PoolReport pool() const override {
    if (table().pool_json == nullptr) return Engine::pool();
    kvcheck_error e{};
    const char* text = table().pool_json(handle_, &e);
    if (text == nullptr) throw_plugin_error("pool_json", e.code, e);
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    PoolReport report;
    const std::string why =
        json.is_discarded() ? std::string("not valid JSON") : wire::parse_pool_reply(json, report);
    if (!why.empty()) throw std::runtime_error("plugin pool_json: " + why);
    return report;
  }

  std::string unheld_storage_check() const override {
    if (table().storage_check == nullptr) return Engine::unheld_storage_check();
    kvcheck_error e{};
    const char* text = table().storage_check(handle_, &e);
    if (text == nullptr) throw_plugin_error("storage_check", e.code, e);
    return text;
  }

  int reused(SequenceId sequence) const override {
    if (table().reused == nullptr) return Engine::reused(sequence);
    kvcheck_error e{};
    int32_t n = 0;
    check("reused", table().reused(handle_, sequence, &n, &e), e);
    return n;
  }

  void offload(SequenceId sequence) override {
    if (table().offload == nullptr) return Engine::offload(sequence);
    kvcheck_error e{};
    check("offload", table().offload(handle_, sequence, &e), e);
  }

  void save_state(SequenceId sequence) override {
    if (table().save == nullptr) return Engine::save_state(sequence);
    kvcheck_error e{};
    check("save", table().save(handle_, sequence, &e), e);
  }

  void restore_state(SequenceId sequence) override {
    if (table().restore == nullptr) return Engine::restore_state(sequence);
    kvcheck_error e{};
    check("restore", table().restore(handle_, sequence, &e), e);
  }

  void flush_prefix_cache() override {
    if (table().flush_prefix_cache == nullptr) return Engine::flush_prefix_cache();
    kvcheck_error e{};
    check("flush_prefix_cache", table().flush_prefix_cache(handle_, &e), e);
  }

  MemoryReport memory() const override { return {}; }

 private:
  const kvcheck_plugin_v1& table() const { return library_->table; }

  // The snapshot's slots and, where the plugin lists them, their positions
  // (cache_positions); a count or a position out of range is the plugin's
  // failure, as a malformed reply is the exec child's.
  void slots(SequenceId sequence, int layer, CacheSnapshot& snap) const {
    std::vector<int32_t> positions(size_t(options_.capacity));  // [slot]
    int32_t n = -1, listed = -1;
    kvcheck_error e{};
    check("cache_positions",
          table().cache_positions(handle_, sequence, int32_t(layer), positions.data(),
                                  int64_t(positions.size()), &n, &listed, &e),
          e);
    if (n < 0 || n > options_.capacity || (listed != 0 && listed != 1)) {
      throw std::runtime_error("plugin cache_positions: " + std::to_string(n) + " slots (listed " +
                               std::to_string(listed) + "), outside [0, capacity " +
                               std::to_string(options_.capacity) + "] (listed 0 or 1)");
    }
    snap.length = n;
    if (listed == 0) return;
    positions.resize(size_t(n));
    if (const std::string why = wire::positions_problem(positions, config_.max_pos, "positions");
        !why.empty())
      throw std::runtime_error("plugin cache_positions: " + why);
    snap.positions = std::move(positions);
  }

  std::shared_ptr<const Library> library_;
  kvcheck_engine* handle_;
  Config config_;
  EngineOptions options_;
  std::string name_;
  std::vector<kvcheck_batch_entry> entries_;  // [entry] of the current step
};

std::shared_ptr<const Library> open_library(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw InputError("--backend plugin:" + path +
                     ": cannot load: " + (why ? why : "dlopen failed"));
  }
  auto entry = reinterpret_cast<kvcheck_plugin_entry_fn>(dlsym(handle, KVCHECK_PLUGIN_ENTRY));
  if (entry == nullptr) {
    throw InputError("--backend plugin:" + path + ": missing symbol " KVCHECK_PLUGIN_ENTRY);
  }
  auto library = std::make_shared<Library>();
  library->path = path;
  const kvcheck_plugin_v1* t = entry();
  if (t == nullptr)
    throw InputError("--backend plugin:" + path + ": " KVCHECK_PLUGIN_ENTRY "() returned NULL");
  if (t->abi_version < 1 || t->abi_version > KVCHECK_PLUGIN_ABI_VERSION) {
    throw InputError("--backend plugin:" + path + ": ABI version " +
                     std::to_string(t->abi_version) + ", this kvcheck speaks versions 1 to " +
                     std::to_string(KVCHECK_PLUGIN_ABI_VERSION));
  }
  if (t->struct_size < KVCHECK_PLUGIN_CORE_SIZE) {
    throw InputError("--backend plugin:" + path + ": struct_size " +
                     std::to_string(t->struct_size) + " is smaller than version 1's " +
                     std::to_string(KVCHECK_PLUGIN_CORE_SIZE));
  }
  // A table of an older version ends at that version's last function
  // (version 1 at start_keyed, version 2 at offload) whatever its
  // struct_size says: what lies past it is never read.
  const size_t known = t->abi_version == 1   ? KVCHECK_PLUGIN_V1_SIZE
                       : t->abi_version == 2 ? KVCHECK_PLUGIN_V2_SIZE
                                             : sizeof(kvcheck_plugin_v1);
  const size_t taken = std::min<size_t>(t->struct_size, known);
  std::memcpy(&library->table, t, taken);
  library->table.struct_size = uint32_t(taken);  // the bytes read, as the checks below name them
  t = &library->table;
  const std::pair<const char*, bool> required[] = {{"traits_json", t->traits_json != nullptr},
                                                   {"create", t->create != nullptr},
                                                   {"destroy", t->destroy != nullptr},
                                                   {"start", t->start != nullptr},
                                                   {"step", t->step != nullptr},
                                                   {"length", t->length != nullptr}};
  for (const auto& [name, present] : required) {
    if (!present)
      throw InputError("--backend plugin:" + path + ": required function " + name + " is NULL");
  }
  return library;
}

// The traits must agree with the table: an operation declared but NULL is a
// contradiction, never a silent "not applicable".
void check_declared_operations(const std::string& path, const kvcheck_plugin_v1& t,
                               const EngineTraits& traits) {
  const OperationTraits& ops = traits.operations;
  // {trait, declared without a function, where the function sits in the table}
  struct Declared {
    const char* name;
    bool contradiction;
    size_t end;                 // the table's bytes up to and including the function
    const char* function = "";  // named where it is not the trait's own
  };
  const auto end_of = [](size_t offset) { return offset + sizeof(void*); };
  const Declared declared[] = {
      {"finish", ops.finish && t.finish == nullptr, 0},
      {"reset", ops.reset && t.reset == nullptr, 0},
      {"cache_snapshot", ops.cache_snapshot && t.cache == nullptr, 0},
      {"fork", ops.fork && t.fork == nullptr, end_of(offsetof(kvcheck_plugin_v1, fork))},
      {"truncate", ops.truncate && t.truncate == nullptr,
       end_of(offsetof(kvcheck_plugin_v1, truncate))},
      {"pool_report", ops.pool_report && t.pool_json == nullptr,
       end_of(offsetof(kvcheck_plugin_v1, pool_json))},
      {"storage_check", ops.storage_check && t.storage_check == nullptr,
       end_of(offsetof(kvcheck_plugin_v1, storage_check))},
      {"prefix_cache", ops.prefix_cache && (t.reused == nullptr || t.flush_prefix_cache == nullptr),
       end_of(offsetof(kvcheck_plugin_v1, flush_prefix_cache))},
      {"erase", ops.erase && t.erase == nullptr, end_of(offsetof(kvcheck_plugin_v1, erase))},
      {"shift", ops.shift && t.shift == nullptr, end_of(offsetof(kvcheck_plugin_v1, shift))},
      // A ring's snapshot holds fewer slots than the sequence's length: the
      // positions must say which.
      {"sliding_window", ops.sliding_window && ops.cache_snapshot && t.cache_positions == nullptr,
       end_of(offsetof(kvcheck_plugin_v1, cache_positions)), " cache_positions"},
      {"abort", ops.abort && t.abort == nullptr, end_of(offsetof(kvcheck_plugin_v1, abort))},
      {"cache_keys", ops.cache_keys && t.start_keyed == nullptr,
       end_of(offsetof(kvcheck_plugin_v1, start_keyed))},
      {"offload", ops.offload && t.offload == nullptr,
       end_of(offsetof(kvcheck_plugin_v1, offload))},
      {"save_restore", ops.save_restore && (t.save == nullptr || t.restore == nullptr),
       end_of(offsetof(kvcheck_plugin_v1, restore)), " save or restore"}};
  for (const Declared& d : declared) {
    if (!d.contradiction) continue;
    throw InputError("--backend plugin:" + path + ": traits.operations." + d.name +
                     " is true but its function" + d.function + " is NULL" +
                     (t.struct_size < d.end ? " (or past the table's struct_size " +
                                                  std::to_string(t.struct_size) + ")"
                                            : std::string()));
  }
  if (ops.div) {
    throw InputError("--backend plugin:" + path +
                     ": traits.operations.div is true, but the C plugin ABI does not carry div "
                     "(docs/OPERATIONS.md, \"Div\"); use the exec protocol");
  }
}

// The tensors as the ABI passes them, pointing into `weights`. P1 makes a
// new model for nearly every engine, so the list is walked afresh each time;
// the buffers are kept so that walking allocates nothing.
const std::vector<kvcheck_tensor>& tensor_list(const Config& config, const Weights& weights) {
  thread_local std::string names;                    // every name, each NUL-terminated
  thread_local std::vector<size_t> name_at;          // [tensor] offset into names
  thread_local std::vector<kvcheck_tensor> tensors;  // [tensor]
  names.clear();
  name_at.clear();
  tensors.clear();
  for_each_tensor(
      config, weights,
      [](std::string_view name, std::span<const int64_t> shape, const std::vector<float>& data) {
        name_at.push_back(names.size());
        names.append(name).push_back('\0');
        kvcheck_tensor t{};
        t.rank = int32_t(shape.size());
        for (size_t i = 0; i < shape.size() && i < 4; ++i) t.shape[i] = shape[i];
        t.data = data.data();
        tensors.push_back(t);
      });
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].name = names.data() + name_at[i];
  return tensors;
}

// The config in both of the ABI's forms. A case creates several engines of
// one model: build them once.
struct ConfigForms {
  std::string json;
  std::vector<kvcheck_config_value> values;  // [field], keys and texts static
};
const ConfigForms& config_forms(const Config& config) {
  thread_local std::optional<Config> built_for;
  thread_local ConfigForms forms;
  if (!built_for || !(*built_for == config)) {
    forms.json = config_to_json(config).dump();
    forms.values.clear();
    for (const ConfigValue& v : config_values(config)) {
      forms.values.push_back({v.key.data(), v.text.empty() ? nullptr : v.text.data(), v.number});
    }
    built_for = config;
  }
  return forms;
}

Backend plugin_backend(const BackendSpec& spec) {
  const std::string path = spec.name.substr(std::strlen("plugin:"));
  if (path.empty())
    throw InputError("--backend plugin: needs a path, e.g. plugin:./libmy_engine.so");
  std::shared_ptr<const Library> library = open_library(path);
  kvcheck_error e{};
  const char* json = library->table.traits_json(spec.options_text.c_str(), &e);
  if (json == nullptr) throw InputError("--backend plugin:" + path + ": traits: " + message_of(e));
  Result<EngineTraits> traits = traits_from_json_text(json);
  if (!traits.ok()) throw InputError("--backend plugin:" + path + ": " + traits.error());
  check_declared_operations(path, library->table, traits.value());
  if (traits.value().operations.storage_map) {
    throw InputError("--backend plugin:" + path +
                     ": traits.operations.storage_map is true, but the plugin ABI v1 has no "
                     "storage introspection call");
  }
  if (traits.value().operations.fault_switches) {
    throw InputError("--backend plugin:" + path +
                     ": traits.operations.fault_switches is true, but the plugin ABI carries no "
                     "fault switches (put seeded bugs in the backend options instead)");
  }
  Backend b;
  b.forkable = true;
  b.traits = traits.value();
  const std::string options = spec.options_text;
  const std::string name = b.traits.identity.name;
  b.make_factory = [library, options, name](FaultSet) -> EngineFactory {
    return
        [library, options, name](const Config& config, const Weights& weights,
                                 const EngineOptions& engine_options) -> std::unique_ptr<Engine> {
          const std::vector<kvcheck_tensor>& tensors = tensor_list(config, weights);
          const ConfigForms& forms = config_forms(config);
          kvcheck_create_args args{};
          args.struct_size = sizeof(args);
          args.config_json = forms.json.c_str();
          args.tensors = tensors.data();
          args.n_tensors = int64_t(tensors.size());
          args.capacity = engine_options.capacity;
          args.max_rows = engine_options.max_rows;
          args.kv_dtype = kv_dtype_name(engine_options.kv_dtype);
          args.options = options.c_str();
          args.block_size = engine_options.block_size;
          args.pool_blocks = engine_options.pool_blocks;
          args.prefix_cache = engine_options.prefix_cache ? 1 : 0;
          args.config_values = forms.values.data();
          args.n_config_values = int64_t(forms.values.size());
          args.host_blocks = engine_options.host_blocks;
          kvcheck_error error{};
          kvcheck_engine* handle = library->table.create(&args, &error);
          if (handle == nullptr) {
            throw_plugin_error("create",
                               error.code == KVCHECK_OK ? KVCHECK_ERR_INTERNAL : error.code, error);
          }
          return std::make_unique<PluginEngine>(library, handle, config, engine_options, name);
        };
  };
  return b;
}

}  // namespace

void register_plugin_loader(BackendRegistry& registry) {
  registry.add_prefix("plugin:", "an engine in a shared object (include/kvcheck/engine_plugin.h)",
                      plugin_backend);
}

}  // namespace kvcheck
