// The engine protocol's request loop (tools/serve_loop.h): frames in, one
// reply per request out, in order, with kvcheck's version-2 ids mapped to
// the engine's own. The engine and its traits come from an EngineMaker.
#include "tools/serve_loop.h"

#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/exec/exec.h"
#include "backends/exec/exec_reply.h"
#include "backends/exec/exec_wire.h"
#include "engine/traits_json.h"
#include "model/status.h"

namespace kvcheck {
namespace {

using nlohmann::json;

// A refusal the client should see as a typed error reply.
struct Refusal {
  std::string kind, message;
};

class Server {
 public:
  Server(EngineMaker& maker, int max_version) : maker_(maker), max_version_(max_version) {}

  // One request -> the reply's control JSON; logits or K/V go to `payloads`.
  json handle(const json& request, std::vector<std::string>& payloads) {
    const std::string op = request.value("op", "");
    if (op == "hello") return hello(request);
    if (op == "load") return load(request);
    if (op == "unload") return models_.erase(id(request, "model")), json::object();
    if (op == "create") return create(request);
    if (op == "destroy") return engines_.erase(id(request, "engine")), json::object();
    Served& e = engine(request);
    if (op == "start") return start(e, request);
    if (op == "step") return step(e, request, payloads);
    if (op == "finish" || op == "abort") {
      const SequenceId s = e.sequence(id(request, "sequence"));
      op == "finish" ? e.engine->finish(s) : e.engine->abort(s);
      e.client_ids.erase(id(request, "sequence"));
      return json::object();
    }
    if (op == "reset") return e.engine->reset(), e.client_ids.clear(), json::object();
    if (op == "fork") return fork(e, request);
    if (op == "truncate") {
      e.engine->truncate(e.sequence(id(request, "sequence")), int(id(request, "n")));
      return json::object();
    }
    if (op == "erase" || op == "shift" || op == "div") {
      const SequenceId s = e.sequence(id(request, "sequence"));
      const int p0 = int(id(request, "p0")), p1 = int(id(request, "p1"));
      if (op == "erase") {
        e.engine->erase(s, p0, p1);
      } else if (op == "shift") {
        e.engine->shift(s, p0, p1, int(id(request, "delta")));
      } else {
        e.engine->div(s, p0, p1, int(id(request, "d")));
      }
      return json::object();
    }
    if (op == "pool") return pool(e);
    if (op == "flush") return e.engine->flush_prefix_cache(), json::object();
    if (op == "offload") {
      return e.engine->offload(e.sequence(id(request, "sequence"))), json::object();
    }
    if (op == "save") {
      return e.engine->save_state(e.sequence(id(request, "sequence"))), json::object();
    }
    if (op == "restore") {
      return e.engine->restore_state(e.sequence(id(request, "sequence"))), json::object();
    }
    if (op == "storage_check") return {{"problem", e.engine->unheld_storage_check()}};
    if (op == "length") return {{"length", e.engine->length(e.sequence(id(request, "sequence")))}};
    if (op == "cache") return cache(e, request, payloads);
    throw Refusal{"input", "unknown op \"" + op + "\""};
  }

 private:
  // An engine and, in protocol 2, the ids kvcheck gave its sequences.
  struct Served {
    std::unique_ptr<Engine> engine;
    bool client_named = false;                 // protocol 2
    std::map<int64_t, SequenceId> client_ids;  // kvcheck's id -> the engine's
    SequenceId sequence(int64_t client) const {
      if (!client_named) return client;
      const auto it = client_ids.find(client);
      // An id no engine gave: the engine's own refusal names it.
      return it == client_ids.end() ? SequenceId(-1 - client) : it->second;
    }
  };

  json hello(const json& r) {
    const EngineTraits traits = maker_.traits();
    // The highest version both speak.
    version_ = r.value("protocol", 1) >= 2 && max_version_ >= 2 ? 2 : 1;
    return {{"protocol", version_}, {"traits", traits_to_json(traits)}};
  }

  // Protocol 2: kvcheck names the id; 1: the server does.
  int64_t new_id(const json& r, const char* key) {
    if (version_ < 2) return ++next_id_;
    return id(r, key);
  }

  json load(const json& r) {
    std::shared_ptr<ServedModel> loaded;
    try {
      loaded = maker_.load(string_field(r, "path"));
    } catch (const InputError& e) {
      throw Refusal{"input", e.what()};
    }
    const int64_t model = new_id(r, "model");
    models_[model] = std::move(loaded);
    return {{"model", model}};
  }

  // An optional "cache_key" (docs/ENGINE_PROTOCOL.md) keys the sequence.
  json start(Served& e, const json& r) {
    const uint64_t key = r.value("cache_key", uint64_t{0});
    if (version_ < 2) return {{"sequence", e.engine->start_keyed(key)}};
    const int64_t client = id(r, "sequence");
    e.client_ids[client] = e.engine->start_keyed(key);
    return {{"sequence", client}};
  }

  // Protocol 2: kvcheck names the child, as for start.
  json fork(Served& e, const json& r) {
    const SequenceId child = e.engine->fork(e.sequence(id(r, "parent")), int(id(r, "n")));
    if (version_ < 2) return {{"sequence", child}};
    const int64_t client = id(r, "sequence");
    e.client_ids[client] = child;
    return {{"sequence", client}};
  }

  // Block tables name kvcheck's sequence ids in protocol 2.
  json pool(Served& e) {
    PoolReport report = e.engine->pool();
    if (e.client_named) {
      for (auto& [sequence, blocks] : report.tables) {
        for (const auto& [client, own] : e.client_ids)
          if (own == sequence) sequence = client;
      }
    }
    return wire::encode_pool_reply(report);
  }

  json create(const json& r) {
    const auto it = models_.find(id(r, "model"));
    if (it == models_.end()) throw Refusal{"input", "unknown model"};
    EngineOptions options;
    options.capacity = int(id(r, "capacity"));
    options.max_rows = int(id(r, "max_rows"));
    if (r.contains("block_size")) {
      options.block_size = int(id(r, "block_size"));
      options.pool_blocks = int(id(r, "pool_blocks"));
    }
    if (const auto prefix = r.find("prefix_cache"); prefix != r.end()) {
      if (!prefix->is_boolean()) throw Refusal{"input", "\"prefix_cache\" must be a boolean"};
      options.prefix_cache = prefix->get<bool>();
    }
    if (const auto prompt = r.find("prompt_logits"); prompt != r.end()) {
      if (!prompt->is_boolean()) throw Refusal{"input", "\"prompt_logits\" must be a boolean"};
      options.prompt_logits = prompt->get<bool>();
    }
    if (r.contains("host_blocks")) options.host_blocks = int(id(r, "host_blocks"));
    Result<KvDtype> dtype = parse_kv_dtype(string_field(r, "kv_dtype"));
    if (!dtype.ok()) throw Refusal{"input", dtype.error()};
    options.kv_dtype = dtype.value();
    const int64_t engine = new_id(r, "engine");
    // Built before it is registered: a refused create must leave no engine
    // behind (the next request naming it would find a null one).
    std::unique_ptr<Engine> built = maker_.create(*it->second, options);
    Served& served = engines_[engine];
    served.engine = std::move(built);
    served.client_named = version_ >= 2;
    return {{"engine", engine}};
  }

  json step(Served& e, const json& r, std::vector<std::string>& payloads) {
    const json& entries = r.at("entries");
    std::vector<std::vector<int32_t>> tokens;  // [entry][n]
    std::vector<BatchEntry> batch;
    for (const json& entry : entries)
      tokens.push_back(entry.at("tokens").get<std::vector<int32_t>>());
    for (size_t i = 0; i < tokens.size(); ++i)
      batch.push_back({e.sequence(id(entries[i], "sequence")), tokens[i]});
    e.engine->step(batch, logits_);
    payloads.emplace_back(reinterpret_cast<const char*>(logits_.data()), logits_.size() * 4);
    json reply = {{"payloads", {logits_.size() * 4}}};
    if (e.engine->options().prefix_cache) {
      json reused = json::array();
      for (const BatchEntry& b : batch) reused.push_back(e.engine->reused(b.sequence));
      reply["reused"] = std::move(reused);
    }
    return reply;
  }

  json cache(Served& e, const json& r, std::vector<std::string>& payloads) {
    const CacheSnapshot s = e.engine->cache(e.sequence(id(r, "sequence")), int(id(r, "layer")));
    const size_t n = size_t(s.length) * size_t(s.n_kv_heads) * size_t(s.head_dim);
    // Widened element by element: exact for every stored dtype, scales included.
    std::string k(n * 4, '\0'), v(n * 4, '\0');
    size_t i = 0;
    for (int pos = 0; pos < s.length; ++pos) {
      for (int h = 0; h < s.n_kv_heads; ++h) {
        for (int d = 0; d < s.head_dim; ++d, ++i) {
          const float kx = s.k_at(pos, h, d), vx = s.v_at(pos, h, d);
          std::memcpy(k.data() + 4 * i, &kx, 4);
          std::memcpy(v.data() + 4 * i, &vx, 4);
        }
      }
    }
    payloads.push_back(std::move(k));
    payloads.push_back(std::move(v));
    json reply = {{"length", s.length}, {"payloads", {n * 4, n * 4}}};
    // Only where the engine lists them (erase, shift, a window's ring): an
    // absent "positions" is slot i at position i.
    if (!s.positions.empty()) reply["positions"] = s.positions;
    return reply;
  }

  Served& engine(const json& r) {
    const auto it = engines_.find(id(r, "engine"));
    if (it == engines_.end()) throw Refusal{"input", "unknown engine"};
    return it->second;
  }

  static int64_t id(const json& r, const char* key) {
    const auto it = r.find(key);
    if (it == r.end() || !it->is_number_integer())
      throw Refusal{"input", std::string("\"") + key + "\" must be an integer"};
    return it->get<int64_t>();
  }

  static std::string string_field(const json& r, const char* key) {
    const auto it = r.find(key);
    if (it == r.end() || !it->is_string())
      throw Refusal{"input", std::string("\"") + key + "\" must be a string"};
    return it->get<std::string>();
  }

  EngineMaker& maker_;
  int64_t next_id_ = 0;
  std::map<int64_t, std::shared_ptr<ServedModel>> models_;
  std::map<int64_t, Served> engines_;
  int max_version_;            // --protocol: the highest version it offers
  int version_ = 1;            // agreed in hello
  std::vector<float> logits_;  // [sum n][V] of the last step
};

// stdin and stdout with buffers: requests kvcheck sent ahead (protocol 2) are
// read with one read(), and their replies leave in one write(), made only
// when no further request is waiting. Syscalls and wake-ups were most of the
// protocol's cost per case. Before it sleeps on stdin it polls for `spin`, as
// kvcheck does on its replies (wire::spin_until_ready): a request that comes
// within the spin spares kvcheck's write the wake-up of a sleeping reader.
class Pipes {
 public:
  explicit Pipes(std::chrono::microseconds spin) : spin_(spin) {}

  // False on end of file or an error.
  bool read(void* data, size_t size) {
    auto* out = static_cast<uint8_t*>(data);
    while (size > 0) {
      if (pos_ == end_) {
        if (!flush()) return false;  // kvcheck waits for these before it sends more
        pollfd in{0, POLLIN, 0};
        wire::spin_until_ready({&in, 1}, spin_);
        const ssize_t got = ::read(0, in_.data(), in_.size());
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        pos_ = 0, end_ = size_t(got);
      }
      const size_t take = std::min(size, end_ - pos_);
      std::memcpy(out, in_.data() + pos_, take);
      pos_ += take, out += take, size -= take;
    }
    return true;
  }
  void write(const std::string& bytes) { out_ += bytes; }
  bool flush() {
    const bool ok = wire::write_all(1, out_.data(), out_.size());
    out_.clear();
    return ok;
  }

 private:
  std::chrono::microseconds spin_;
  std::vector<uint8_t> in_ = std::vector<uint8_t>(1 << 16);  // [bytes] read from stdin
  size_t pos_ = 0, end_ = 0;                                 // [pos_, end_) not yet consumed
  std::string out_;                                          // replies not yet written
};

}  // namespace

std::optional<std::chrono::microseconds> server_spin(const char* text, const std::string& where) {
  if (text == nullptr || *text == '\0') return wire::default_spin();
  try {
    return exec_spin(text, where);
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return std::nullopt;
  }
}

std::shared_ptr<ServedModel> EngineMaker::load(const std::string& folder) {
  Result<ModelFile> file = load_safetensors_file(folder + "/model.safetensors");
  auto model = std::make_shared<ServedModel>();
  model->file = std::move(file.value());  // throws InputError with the reason
  return model;
}

int serve_engines(EngineMaker& maker, int max_version, std::chrono::microseconds spin,
                  const std::string& name) {
  Server server(maker, max_version);
  Pipes pipes(spin);
  std::string text;
  for (;;) {
    uint8_t header[4];
    if (!pipes.read(header, 4)) return pipes.flush(), 0;  // end of file: kvcheck is done
    const uint32_t length = wire::read_le32(header);
    if (length > wire::kMaxControlBytes) {
      std::fprintf(stderr, "%s: request of %u bytes\n", name.c_str(), length);
      return 2;
    }
    text.resize(length);
    if (!pipes.read(text.data(), length)) return 2;
    const json request = json::parse(text, nullptr, false);
    if (request.is_object() && request.value("op", "") == "bye") return pipes.flush(), 0;
    std::vector<std::string> payloads;
    json reply;
    try {
      if (!request.is_object()) throw Refusal{"input", "the request is not a JSON object"};
      reply = server.handle(request, payloads);
    } catch (const Refusal& r) {
      reply = {{"error", {{"kind", r.kind}, {"message", r.message}}}};
    } catch (const EngineError& e) {
      reply = {{"error", {{"kind", wire::kind_name(e.kind())}, {"message", e.what()}}}};
    } catch (const std::exception& e) {
      reply = {{"error", {{"kind", "internal"}, {"message", e.what()}}}};
    }
    pipes.write(wire::frame(reply.dump()));
    for (const std::string& p : payloads) pipes.write(wire::frame(p));
  }
}

}  // namespace kvcheck
