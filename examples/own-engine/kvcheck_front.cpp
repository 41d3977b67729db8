#include "kvcheck_front.h"

#include <cstring>
#include <map>
#include <memory>

#include "engine/traits_json.h"
#include "model/status.h"
#include "own_engine.h"
#include "own_traits.h"

namespace {

using kvcheck::EngineError;

// own::Error -> the exception kvcheck's Engine interface uses.
[[noreturn]] void rethrow(const own::Error& e) {
  switch (e.code) {
    case own::ErrorCode::kCapacity:
      throw EngineError(EngineError::Kind::kCapacity, e.what());
    case own::ErrorCode::kRows:
      throw EngineError(EngineError::Kind::kRows, e.what());
    case own::ErrorCode::kUnknownSequence:
      throw EngineError(EngineError::Kind::kUnknownSequence, e.what());
    case own::ErrorCode::kBadToken:
      throw EngineError(EngineError::Kind::kBadToken, e.what());
    case own::ErrorCode::kBadBatch:
      throw EngineError(EngineError::Kind::kBadBatch, e.what());
    case own::ErrorCode::kInput:
      break;
  }
  throw kvcheck::InputError(e.what());
}

template <class F>
auto translated(F&& call) {
  try {
    return call();
  } catch (const own::Error& e) {
    rethrow(e);
  }
}

own::Engine make_core(const kvcheck::Config& c, const kvcheck::Weights& weights,
                      const kvcheck::EngineOptions& options, own::Options own_options) {
  if (c.family != kvcheck::Family::kLlama || c.qkv_bias ||
      options.kv_dtype != kvcheck::KvDtype::kF32) {
    throw kvcheck::InputError("own-engine: only llama models with an f32 KV cache");
  }
  std::map<std::string, const std::vector<float>*> named;  // canonical name -> data
  for (const kvcheck::TensorView& view : kvcheck::tensor_views(c, weights))
    named[view.name] = view.data;
  const own::TensorLookup lookup = [&](const std::string& name, size_t elements) {
    const auto it = named.find(name);
    if (it == named.end() || it->second->size() != elements) {
      throw own::Error(own::ErrorCode::kInput,
                       "own-engine: tensor " + name + " missing or misshapen");
    }
    return it->second->data();
  };
  const own::Shape shape{c.n_layers, c.d_model, c.n_heads,    c.n_kv_heads, c.head_dim,
                         c.d_ff,     c.vocab,   c.rope_theta, c.norm_eps};
  return own::Engine(shape, lookup, options.capacity, options.max_rows, own_options);
}

class OwnEngine final : public kvcheck::Engine {
 public:
  OwnEngine(const kvcheck::Config& config, const kvcheck::Weights& weights,
            const kvcheck::EngineOptions& options, own::Options own_options)
      : config_(config),
        options_(options),
        core_(translated([&] { return make_core(config, weights, options, own_options); })) {}

  const kvcheck::Config& config() const override { return config_; }
  const kvcheck::EngineOptions& options() const override { return options_; }
  std::string name() const override { return "own-engine"; }

  kvcheck::SequenceId start() override {
    return translated([&] { return core_.start(); });
  }

  void step(std::span<const kvcheck::BatchEntry> batch, std::vector<float>& logits) override {
    std::vector<own::Chunk> chunks;  // [entry]
    size_t tokens = 0;
    for (const kvcheck::BatchEntry& e : batch) {
      chunks.push_back({e.sequence, e.tokens.data(), int(e.tokens.size())});
      tokens += e.tokens.size();
    }
    logits.assign(tokens * size_t(config_.vocab), 0.0f);
    translated([&] { core_.step(chunks, logits.data()); });
  }

  void finish(kvcheck::SequenceId s) override {
    translated([&] { core_.finish(s); });
  }
  void reset() override { core_.reset(); }
  void save_state(kvcheck::SequenceId s) override {
    translated([&] { core_.save(s); });
  }
  void restore_state(kvcheck::SequenceId s) override {
    translated([&] { core_.restore(s); });
  }
  int length(kvcheck::SequenceId s) const override {
    return translated([&] { return core_.length(s); });
  }

  kvcheck::CacheSnapshot cache(kvcheck::SequenceId s, int layer) const override {
    return translated([&] {
      kvcheck::CacheSnapshot snap;
      snap.dtype = kvcheck::KvDtype::kF32;
      snap.length = core_.length(s);
      snap.n_kv_heads = config_.n_kv_heads;
      snap.head_dim = config_.head_dim;
      const std::vector<float>& k = core_.keys(s, layer);
      const std::vector<float>& v = core_.values(s, layer);
      snap.k.resize(k.size() * sizeof(float));
      snap.v.resize(v.size() * sizeof(float));
      std::memcpy(snap.k.data(), k.data(), snap.k.size());
      std::memcpy(snap.v.data(), v.data(), snap.v.size());
      return snap;
    });
  }

  kvcheck::MemoryReport memory() const override { return {}; }

 private:
  kvcheck::Config config_;
  kvcheck::EngineOptions options_;
  own::Engine core_;
};

}  // namespace

kvcheck::Backend make_own_engine(const kvcheck::BackendSpec& spec) {
  own::Options options;
  try {
    options = own::parse_options(spec.options_text);
  } catch (const own::Error& e) {
    throw kvcheck::InputError("--backend " + spec.name + ": " + e.what());
  }
  const kvcheck::Result<kvcheck::EngineTraits> traits =
      kvcheck::traits_from_json_text(own::kTraitsJson);
  if (!traits.ok()) throw kvcheck::InputError("own-engine traits: " + traits.error());
  kvcheck::Backend backend;
  backend.traits = traits.value();
  backend.make_factory = [options](kvcheck::FaultSet) -> kvcheck::EngineFactory {
    return [options](const kvcheck::Config& c, const kvcheck::Weights& w,
                     const kvcheck::EngineOptions& o) -> std::unique_ptr<kvcheck::Engine> {
      return std::make_unique<OwnEngine>(c, w, o, options);
    };
  };
  return backend;
}
