// kvcheck-serve: the in-tree CPU engine behind the engine protocol
// (docs/ENGINE_PROTOCOL.md), so that `--backend exec:kvcheck-serve` proves
// the protocol on a bitwise-invariant engine and measures what it costs.
//   kvcheck-serve [--reference]   (--reference: the scalar reference kernels)
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/exec_wire.h"
#include "backends/in_tree.h"
#include "engine/cpu/cpu_engine.h"
#include "engine/traits_json.h"
#include "model/safetensors.h"
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
  explicit Server(KernelPath kernels) : kernels_(kernels) {}

  // One request -> the reply's control JSON; logits or K/V go to `payloads`.
  json handle(const json& request, std::vector<std::string>& payloads) {
    const std::string op = request.value("op", "");
    if (op == "hello") return hello();
    if (op == "load") return load(string_field(request, "path"));
    if (op == "unload") return models_.erase(id(request, "model")), json::object();
    if (op == "create") return create(request);
    if (op == "destroy") return engines_.erase(id(request, "engine")), json::object();
    Engine& e = engine(request);
    if (op == "start") return {{"sequence", e.start()}};
    if (op == "step") return step(e, request, payloads);
    if (op == "finish") return e.finish(id(request, "sequence")), json::object();
    if (op == "reset") return e.reset(), json::object();
    if (op == "length") return {{"length", e.length(id(request, "sequence"))}};
    if (op == "cache") return cache(e, request, payloads);
    throw Refusal{"input", "unknown op \"" + op + "\""};
  }

 private:
  json hello() const {
    EngineTraits traits = cpu_engine_traits(kernels_);
    traits.operations.fault_switches = false;  // v1 carries no fault switches
    traits.operations.storage_map = false;     // nor a storage map
    traits.identity.name += "-serve";
    return {{"protocol", wire::kProtocolVersion}, {"traits", traits_to_json(traits)}};
  }

  json load(const std::string& folder) {
    Result<ModelFile> file = load_safetensors_file(folder + "/model.safetensors");
    if (!file.ok()) throw Refusal{"input", file.error()};
    models_[++next_id_] = std::make_shared<ModelFile>(std::move(file.value()));
    return {{"model", next_id_}};
  }

  json create(const json& r) {
    const auto it = models_.find(id(r, "model"));
    if (it == models_.end()) throw Refusal{"input", "unknown model"};
    EngineOptions options;
    options.capacity = int(id(r, "capacity"));
    options.max_rows = int(id(r, "max_rows"));
    options.kernels = kernels_;
    Result<KvDtype> dtype = parse_kv_dtype(string_field(r, "kv_dtype"));
    if (!dtype.ok()) throw Refusal{"input", dtype.error()};
    options.kv_dtype = dtype.value();
    engines_[++next_id_] = make_cpu_engine(it->second->config, it->second->weights, options);
    return {{"engine", next_id_}};
  }

  json step(Engine& e, const json& r, std::vector<std::string>& payloads) {
    const json& entries = r.at("entries");
    std::vector<std::vector<int32_t>> tokens;  // [entry][n]
    std::vector<BatchEntry> batch;
    for (const json& entry : entries)
      tokens.push_back(entry.at("tokens").get<std::vector<int32_t>>());
    for (size_t i = 0; i < tokens.size(); ++i)
      batch.push_back({id(entries[i], "sequence"), tokens[i]});
    e.step(batch, logits_);
    payloads.emplace_back(reinterpret_cast<const char*>(logits_.data()), logits_.size() * 4);
    return {{"payloads", {logits_.size() * 4}}};
  }

  json cache(Engine& e, const json& r, std::vector<std::string>& payloads) {
    const CacheSnapshot s = e.cache(id(r, "sequence"), int(id(r, "layer")));
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
    return {{"length", s.length}, {"payloads", {n * 4, n * 4}}};
  }

  Engine& engine(const json& r) {
    const auto it = engines_.find(id(r, "engine"));
    if (it == engines_.end()) throw Refusal{"input", "unknown engine"};
    return *it->second;
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

  KernelPath kernels_;
  int64_t next_id_ = 0;
  std::map<int64_t, std::shared_ptr<ModelFile>> models_;
  std::map<int64_t, std::unique_ptr<Engine>> engines_;
  std::vector<float> logits_;  // [sum n][V] of the last step
};

bool send(const std::string& bytes) {
  return wire::write_all(1, bytes.data(), bytes.size());
}

int serve(KernelPath kernels) {
  Server server(kernels);
  std::string text;
  for (;;) {
    uint8_t header[4];
    if (!wire::read_exact(0, header, 4)) return 0;  // end of file: kvcheck is done
    const uint32_t length = wire::read_le32(header);
    if (length > wire::kMaxControlBytes) {
      std::fprintf(stderr, "kvcheck-serve: request of %u bytes\n", length);
      return 2;
    }
    text.resize(length);
    if (!wire::read_exact(0, text.data(), length)) return 2;
    const json request = json::parse(text, nullptr, false);
    if (request.is_object() && request.value("op", "") == "bye") return 0;
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
    std::string out = wire::frame(reply.dump());
    for (const std::string& p : payloads) out += wire::frame(p);
    if (!send(out)) return 0;
  }
}

}  // namespace
}  // namespace kvcheck

int main(int argc, char** argv) {
  kvcheck::KernelPath kernels = kvcheck::KernelPath::kOptimized;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reference") == 0) {
      kernels = kvcheck::KernelPath::kReference;
    } else {
      std::fprintf(stderr, "kvcheck-serve: unknown argument \"%s\" (known: --reference)\n",
                   argv[i]);
      return 2;
    }
  }
  return kvcheck::serve(kernels);
}
