// The exec backend's session with its child process (backends/exec/exec.cpp
// makes the engines): the child and what it has loaded, its handshake and
// traits, requests and replies on the wire, and a fault that kills it. A
// header of its own because it is one concept, apart from the Engine and
// Pipeline the engines present; only exec.cpp includes it.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "backends/exec/exec_child.h"
#include "backends/exec/exec_models.h"
#include "backends/exec/exec_wire.h"
#include "engine/traits_json.h"
#include "model/status.h"
#include "model/weights.h"

namespace kvcheck::exec_session {

using nlohmann::json;

// A reply of kind "unsupported" or "input": the child does not offer the
// operation (or does not know the op). For an operation its traits declare
// that is a contradiction, which the probe at resolve turns into exit 2.
class NotOffered : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The child and what it has loaded, shared by the backend and every engine
// made from it. A fault kills the child; the next create starts a new one
// (a new generation), and engines of an old generation refuse every call.
class Session {
 public:
  Session(std::string command, ChildWaits waits) : command_(std::move(command)), waits_(waits) {}

  // Its child's model folders (their own lock: written outside the session's).
  ModelFolders& folders() { return folders_; }

  // The traits of the first handshake; later children must repeat them.
  const json& handshake() {
    std::lock_guard lock(mutex_);
    ensure_child();
    return traits_;
  }

  struct Created {
    int generation = 0;
    int64_t engine = 0, model = 0;
  };

  // Loads the model if needed and creates an engine. In protocol 2 kvcheck
  // names the ids, so neither waits for its reply.
  Created create(const ModelFolder& folder, const EngineOptions& options) {
    std::lock_guard lock(mutex_);
    ensure_child();
    Loaded& model = acquire(folder);
    json request = {{"op", "create"},
                    {"model", model.id},
                    {"capacity", options.capacity},
                    {"max_rows", options.max_rows},
                    {"kv_dtype", kv_dtype_name(options.kv_dtype)}};
    // Paged storage (operations.paged): sent only when asked for, so a
    // child that never declared it never sees the keys.
    if (options.block_size > 0) {
      request["block_size"] = options.block_size;
      request["pool_blocks"] = options.pool_blocks;
    }
    if (options.prefix_cache) request["prefix_cache"] = true;
    if (options.prompt_logits) request["prompt_logits"] = true;
    if (options.host_blocks > 0) request["host_blocks"] = options.host_blocks;
    ++model.users;
    if (version_ >= 2) {
      // The traits accept these options, so create must succeed: its reply
      // is read with the engine's first call that waits, and a refusal fails
      // that call. It goes out now, with the model's load, so that the child
      // loads while kvcheck builds the run's requests (a campaign of P1 on
      // kvcheck-serve: 4 % less wall time).
      request["engine"] = ++next_id_;
      guarded([&] {
        child_->post(request, /*refusal_matters=*/true);
        child_->send();
      });
      return {generation_, next_id_, model.id};
    }
    const json reply = call_ok(request);
    return {generation_, integer(reply, "engine", "create"), model.id};
  }

  // How many children this session has started: cases of one generation ran
  // in one process, one after the other.
  int generation() {
    std::lock_guard lock(mutex_);
    return generation_;
  }

  // The protocol version this child speaks (1 or 2) and, in 2, a fresh id.
  int version() const { return version_; }
  int64_t new_id() {
    std::lock_guard lock(mutex_);
    return ++next_id_;
  }

  // A request of a live engine sent without waiting for its reply (protocol
  // 2); a refusal is thrown by the engine's next call.
  void post(int generation, const json& request) {
    std::lock_guard lock(mutex_);
    if (generation != generation_ || !child_ || !child_->alive()) {
      throw std::runtime_error("exec " + command_ + ": " + request.value("op", "") +
                               ": the child that served this engine is gone: " + last_fault_);
    }
    guarded([&] { child_->post(request, /*refusal_matters=*/true); });
  }

  // A request sent without waiting whose reply is kept (protocol 2): a step,
  // or a state query of a watched step (Pipeline); take_kept returns its reply.
  void post_kept(int generation, int64_t engine, const json& request,
                 const wire::ReplyLimits& limits) {
    std::lock_guard lock(mutex_);
    if (generation != generation_ || !child_ || !child_->alive()) {
      throw std::runtime_error("exec " + command_ + ": " + request.value("op", "") +
                               ": the child that served this engine is gone: " + last_fault_);
    }
    guarded([&] { child_->post_keeping(request, engine, limits); });
  }

  // Sends what was posted, replies unread (ExecEngine::send_posted).
  void send_posted(int generation) {
    std::lock_guard lock(mutex_);
    if (generation != generation_ || !child_ || !child_->alive()) return;
    guarded([&] { child_->send(); });
  }

  // The oldest kept reply of the engine, error replies included (throw_if_error
  // turns them into the engine's exceptions). Replies read before the child
  // died are still returned.
  Reply take_kept(int generation, int64_t engine, const std::string& op) {
    std::lock_guard lock(mutex_);
    if (generation != generation_ || !child_) {
      throw std::runtime_error("exec " + command_ + ": " + op +
                               ": the child that served this engine is gone: " + last_fault_);
    }
    return guarded([&] { return child_->take_kept(engine); });
  }

  // Every reply read, and the engine's first refusal of a request sent
  // ahead not yet raised is raised now (ExecEngine::settle_sent).
  void settle(int generation, int64_t engine) {
    std::lock_guard lock(mutex_);
    if (generation != generation_ || !child_ || !child_->alive()) return;
    guarded([&] { child_->settle(engine); });
  }

  static void throw_if_error(const std::string& op, const Reply& reply) {
    if (reply.error) throw_error(op, *reply.error);
  }

  void destroy(int generation, int64_t engine, const std::string& model_key, int64_t model) {
    std::lock_guard lock(mutex_);
    // Its steps' replies, and their state queries' (ExecEngine::state_tag).
    if (generation == generation_ && child_) child_->forget(engine), child_->forget(-engine);
    if (generation != generation_ || !child_ || !child_->alive()) return;
    guarded([&] { child_->post({{"op", "destroy"}, {"engine", engine}}, false); });
    // Not a later load of the same model, after this one was refused.
    if (auto it = models_.find(model_key); it != models_.end() && it->second.id == model)
      --it->second.users;
  }

  // One call of a live engine; error replies become the engine's exceptions.
  Reply call(int generation, const json& request, size_t max_payloads, size_t max_bytes) {
    std::lock_guard lock(mutex_);
    if (generation != generation_ || !child_ || !child_->alive()) {
      throw std::runtime_error("exec " + command_ + ": " + request.value("op", "") +
                               ": the child that served this engine is gone: " + last_fault_);
    }
    Reply reply = guarded([&] { return child_->call(request, {max_payloads, max_bytes}); });
    if (reply.error) throw_error(request.value("op", ""), *reply.error);
    return reply;
  }

  // A reply that parsed but says something impossible: the child is wrong.
  [[noreturn]] void malformed(const std::string& call, const std::string& why) {
    std::lock_guard lock(mutex_);
    guarded([&]() -> int { child_->fail(call, "malformed reply: " + why); });
    std::abort();  // unreachable: fail() throws
  }

  // An integer field of a reply that an engine call got back.
  int64_t field(const json& reply, const char* key, const std::string& call) {
    const auto it = reply.find(key);
    if (it == reply.end() || !it->is_number_integer()) malformed(call, missing(reply, key));
    return it->get<int64_t>();
  }

 private:
  static std::string missing(const json& reply, const char* key) {
    const auto it = reply.find(key);
    return std::string("\"") + key + "\" must be an integer, got " +
           (it == reply.end() ? std::string("nothing") : it->dump().substr(0, 100));
  }

  // Same, under the lock.
  int64_t integer(const json& reply, const char* key, const std::string& call) {
    const auto it = reply.find(key);
    if (it == reply.end() || !it->is_number_integer())
      guarded([&]() -> int { child_->fail(call, "malformed reply: " + missing(reply, key)); });
    return it->get<int64_t>();
  }

  // Models no engine uses that stay loaded in the child: a model comes back
  // (a property's several engines, the cases a slow backend draws on one
  // model, shrinking, the next turn of a property), and a load is most of a
  // case on such a backend (docs/PERFORMANCE.md, llama.cpp). Past it, the
  // least recently used idle one is unloaded.
  static constexpr size_t kMaxIdleModels = 8;

  struct Loaded {
    int64_t id = 0;
    int users = 0;          // live engines on this model
    uint64_t last_use = 0;  // uses_ at its last acquire
  };

  template <class F>
  auto guarded(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const ChildFault& e) {
      last_fault_ = e.what();
      models_.clear();
      throw;
    }
  }

  void ensure_child() {
    if (child_ && child_->alive()) return;
    ++generation_;
    models_.clear();
    child_ = std::make_unique<ChildProcess>(command_, waits_);
    const json reply = call_ok({{"op", "hello"}, {"protocol", wire::kProtocolVersion}});
    const auto version = reply.find("protocol");
    if (version == reply.end() || !version->is_number_integer() ||
        version->get<int64_t>() < wire::kMinProtocolVersion ||
        version->get<int64_t>() > wire::kProtocolVersion)
      guarded([&]() -> int {
        child_->fail("hello", "it speaks protocol " +
                                  (version != reply.end() ? version->dump() : std::string("?")) +
                                  ", this kvcheck speaks 1 and 2");
      });
    if (generation_ > 1 && version->get<int>() != version_)
      guarded([&]() -> int {
        child_->fail("hello", "the restarted child speaks another protocol version");
      });
    version_ = version->get<int>();
    next_id_ = 0;
    if (!reply.contains("traits") || !reply["traits"].is_object())
      guarded([&]() -> int { child_->fail("hello", "malformed reply: no \"traits\" object"); });
    if (traits_.is_null())
      traits_ = reply["traits"];
    else if (traits_ != reply["traits"])
      guarded([&]() -> int { child_->fail("hello", "the restarted child declared other traits"); });
  }

  // A model the child refused to load is forgotten, so that the next engine
  // on it loads it again and a refusal shows the engine's own message, not
  // "unknown model" from the create that names it.
  void forget_refused_loads() {
    for (const int64_t id : child_->take_refused_loads())
      std::erase_if(models_, [&](const auto& m) { return m.second.id == id; });
  }

  Loaded& acquire(const ModelFolder& folder) {
    forget_refused_loads();
    if (auto it = models_.find(folder.key); it != models_.end()) {
      it->second.last_use = ++uses_;
      if (!child_->load_unread(it->second.id)) return it->second;
      // Its load went out without waiting and its reply is unread: read it
      // before the model is taken as loaded.
      guarded([&] { child_->drain(); });
      forget_refused_loads();
      if (it = models_.find(folder.key); it != models_.end()) return it->second;
    }
    unload_idle_beyond(kMaxIdleModels - 1);
    if (version_ >= 2) {
      const int64_t id = ++next_id_;
      // Its refusal fails the run of the engine that create() names next.
      guarded([&] {
        child_->post({{"op", "load"}, {"path", folder.path}, {"model", id}}, true, next_id_ + 1);
      });
      Loaded& model = models_[folder.key];
      model.id = id;
      model.last_use = ++uses_;
      return model;
    }
    const json reply = call_ok({{"op", "load"}, {"path", folder.path}});
    Loaded& model = models_[folder.key];
    model.id = integer(reply, "model", "load");
    model.last_use = ++uses_;
    return model;
  }

  // Unloads the least recently used models no engine uses until at most
  // `keep` idle ones are left.
  void unload_idle_beyond(size_t keep) {
    for (;;) {
      size_t idle = 0;
      auto oldest = models_.end();
      for (auto it = models_.begin(); it != models_.end(); ++it) {
        if (it->second.users > 0) continue;
        ++idle;
        if (oldest == models_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
      }
      if (idle <= keep) return;
      guarded([&] { child_->post({{"op", "unload"}, {"model", oldest->second.id}}, false); });
      models_.erase(oldest);
    }
  }

  json call_ok(const json& request) {
    Reply reply = guarded([&] { return child_->call(request, {}); });
    if (reply.error) throw_error(request.value("op", ""), *reply.error);
    return std::move(reply.control);
  }

  // wire::parse_reply has checked the kind is one of the protocol's.
  // The engine's trace, where it sent one, follows the first line ("  at
  // FILE:LINE in FUNCTION: CODE" each), which the runner keeps apart.
  [[noreturn]] static void throw_error(const std::string& call, const wire::WireError& error) {
    const std::string what = "exec " + call + ": " + error.message;
    wire::WireError placed = error;
    if (const auto k = wire::parse_kind(error.kind)) {
      placed.message = what;
      throw EngineError(*k, wire::error_text(placed));
    }
    placed.message = what + " (" + error.kind + ")";
    if (error.kind == "unsupported" || error.kind == "input")
      throw NotOffered(wire::error_text(placed));
    throw std::runtime_error(wire::error_text(placed));
  }

  std::mutex mutex_;
  ModelFolders folders_;
  int version_ = 1;
  int64_t next_id_ = 0;  // the last id kvcheck named (protocol 2), this generation
  std::string command_;
  ChildWaits waits_;
  std::unique_ptr<ChildProcess> child_;
  int generation_ = 0;
  json traits_;                           // from the first handshake
  std::map<std::string, Loaded> models_;  // ModelFolder::key -> loaded model, this generation
  uint64_t uses_ = 0;                     // acquires so far (Loaded::last_use)
  std::string last_fault_ = "it was restarted";
};

}  // namespace kvcheck::exec_session
