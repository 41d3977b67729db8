#include "backends/exec/exec.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "backends/exec/exec_child.h"
#include "backends/exec/exec_models.h"
#include "backends/exec/exec_wire.h"
#include "engine/pipeline.h"
#include "engine/traits_json.h"
#include "model/status.h"
#include "model/weights.h"

namespace kvcheck {

namespace {

using nlohmann::json;

constexpr double kDefaultTimeoutSeconds = 30;

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

  struct Loaded {
    int64_t id = 0;
    int users = 0;  // live engines on this model
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
      if (!child_->load_unread(it->second.id)) return it->second;
      // Its load went out without waiting and its reply is unread: read it
      // before the model is taken as loaded.
      guarded([&] { child_->drain(); });
      forget_refused_loads();
      if (it = models_.find(folder.key); it != models_.end()) return it->second;
    }
    for (auto it = models_.begin(); it != models_.end();) {
      if (it->second.users > 0) {
        ++it;
        continue;
      }
      guarded([&] { child_->post({{"op", "unload"}, {"model", it->second.id}}, false); });
      it = models_.erase(it);
    }
    if (version_ >= 2) {
      const int64_t id = ++next_id_;
      // Its refusal fails the run of the engine that create() names next.
      guarded([&] {
        child_->post({{"op", "load"}, {"path", folder.path}, {"model", id}}, true, next_id_ + 1);
      });
      Loaded& model = models_[folder.key];
      model.id = id;
      return model;
    }
    const json reply = call_ok({{"op", "load"}, {"path", folder.path}});
    Loaded& model = models_[folder.key];
    model.id = integer(reply, "model", "load");
    return model;
  }

  json call_ok(const json& request) {
    Reply reply = guarded([&] { return child_->call(request, {}); });
    if (reply.error) throw_error(request.value("op", ""), *reply.error);
    return std::move(reply.control);
  }

  // wire::parse_reply has checked the kind is one of the protocol's.
  [[noreturn]] static void throw_error(const std::string& call, const wire::WireError& error) {
    const std::string what = "exec " + call + ": " + error.message;
    if (const auto k = wire::parse_kind(error.kind)) throw EngineError(*k, what);
    if (error.kind == "unsupported" || error.kind == "input")
      throw NotOffered(what + " (" + error.kind + ")");
    throw std::runtime_error(what + " (" + error.kind + ")");
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
  std::string last_fault_ = "it was restarted";
};

// An engine of the child. In protocol 2 it is also its own Pipeline
// (engine/pipeline.h): steps go out without waiting and their replies are
// read when collected.
class ExecEngine final : public Engine, private Pipeline {
 public:
  ExecEngine(std::shared_ptr<Session> session, const Config& config, const Weights& weights,
             const EngineOptions& options, std::string name)
      : session_(std::move(session)), config_(config), options_(options), name_(std::move(name)) {
    const ModelFolder folder = session_->folders().folder(config_, weights);
    model_key_ = folder.key;
    const Session::Created created = session_->create(folder, options_);
    generation_ = created.generation, id_ = created.engine, model_id_ = created.model;
  }
  ~ExecEngine() override {
    try {
      session_->destroy(generation_, id_, model_key_, model_id_);
    } catch (...) {
      // The child failed on destroy: the next call or create reports it.
    }
  }

  const Config& config() const override { return config_; }
  const EngineOptions& options() const override { return options_; }
  std::string name() const override { return name_; }

  // Protocol 2: kvcheck names the sequence, and where a row is free (so the
  // engine must accept) start goes out without waiting; where every row is
  // taken it waits, for the refusal the engine owes (P9).
  SequenceId start() override {
    if (session_->version() < 2)
      return session_->field(call({{"op", "start"}, {"engine", id_}}).control, "sequence", "start");
    const SequenceId id = session_->new_id();
    const json request = {{"op", "start"}, {"engine", id_}, {"sequence", id}};
    if (int(live_.size()) < options_.max_rows)
      post(request);
    else
      call(request);
    live_.insert(id);
    return id;
  }

  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
    size_t bytes = 0;
    json request = step_request(batch, bytes);
    take_logits(call(request, 1, bytes), batch, bytes, logits);
  }

  Pipeline* pipeline() override { return session_->version() >= 2 ? this : nullptr; }

  // Pipeline: the step goes out with the next request that waits, and its
  // reply is read then (ChildProcess::post_keeping).
  void post_step(std::span<const BatchEntry> batch) override { post_step_request(batch, {}); }

  // The state before and after the step go out with it as one pool query
  // and a length query per sequence. Steps sent back to back, with nothing
  // sent between them, share the state between them: the one after a step
  // is the one before the next.
  void post_watched_step(std::span<const BatchEntry> batch,
                         std::span<const SequenceId> watch) override {
    const bool shares = !posted_.empty() && posted_.back().watched && requests_ == watched_at_ &&
                        std::ranges::equal(posted_.back().watch, watch);
    if (!shares) post_queries(watch);
    post_step_request(batch, watch);
    posted_.back().watched = true;
    posted_.back().shares_before = shares;
    post_queries(watch);
    watched_at_ = requests_;
  }

  void collect_step(std::vector<float>& logits, std::optional<StepStates>& states) override {
    if (posted_.empty()) throw std::logic_error("collect_step: no step was posted");
    const PostedStep step = std::move(posted_.front());
    posted_.pop_front();
    if (!step.watched) {
      const Reply reply = session_->take_kept(generation_, id_, "step");
      Session::throw_if_error("step", reply);
      return take_logits(reply, step.batch, step.bytes, logits);
    }
    collect_watched(step, logits, states);
  }

  void send_posted() override {
    if (!posted_.empty()) session_->send_posted(generation_);
  }

  void settle_sent() override { session_->settle(generation_, id_); }

  int reused(SequenceId sequence) const override {
    const auto it = reused_.find(sequence);
    return it == reused_.end() ? 0 : it->second;
  }

  void flush_prefix_cache() override { call({{"op", "flush"}, {"engine", id_}}); }

  // Protocol 2: a finish of a live sequence and a reset cannot be refused, so
  // they go out without waiting; a finish of anything else waits for its
  // refusal.
  void finish(SequenceId sequence) override {
    const json request = {{"op", "finish"}, {"engine", id_}, {"sequence", sequence}};
    if (session_->version() >= 2 && live_.count(sequence))
      post(request);
    else
      call(request);
    live_.erase(sequence);
  }

  void reset() override {
    const json request = {{"op", "reset"}, {"engine", id_}};
    if (session_->version() >= 2)
      post(request);
    else
      call(request);
    live_.clear();
  }

  // Protocol 2: kvcheck names the child, as for start, and a fork of a live
  // parent where a row is free (which the engine must accept) goes out
  // without waiting; otherwise it waits, for the refusal the engine owes.
  SequenceId fork(SequenceId parent, int n) override {
    json request = {{"op", "fork"}, {"engine", id_}, {"parent", parent}, {"n", n}};
    if (session_->version() < 2) return session_->field(call(request).control, "sequence", "fork");
    const SequenceId id = session_->new_id();
    request["sequence"] = id;
    if (live_.count(parent) && int(live_.size()) < options_.max_rows)
      post(request);
    else
      call(request);
    live_.insert(id);
    return id;
  }

  // Protocol 2: a truncate of a live sequence goes out without waiting, like
  // its finish (a valid n is the caller's, as for every call).
  void truncate(SequenceId sequence, int n) override {
    const json request = {{"op", "truncate"}, {"engine", id_}, {"sequence", sequence}, {"n", n}};
    if (session_->version() >= 2 && live_.count(sequence))
      post(request);
    else
      call(request);
  }

  void erase(SequenceId sequence, int p0, int p1) override {
    call({{"op", "erase"}, {"engine", id_}, {"sequence", sequence}, {"p0", p0}, {"p1", p1}});
  }

  void shift(SequenceId sequence, int p0, int p1, int delta) override {
    call({{"op", "shift"},
          {"engine", id_},
          {"sequence", sequence},
          {"p0", p0},
          {"p1", p1},
          {"delta", delta}});
  }

  int length(SequenceId sequence) const override {
    return checked_length(call({{"op", "length"}, {"engine", id_}, {"sequence", sequence}}));
  }

  CacheSnapshot cache(SequenceId sequence, int layer) const override {
    const size_t row = size_t(config_.kv_width()) * sizeof(float);
    const Reply reply =
        call({{"op", "cache"}, {"engine", id_}, {"sequence", sequence}, {"layer", layer}}, 2,
             size_t(options_.capacity) * row);
    const int64_t n = session_->field(reply.control, "length", "cache");
    if (n < 0 || n > options_.capacity || reply.payloads.size() != 2 ||
        reply.payloads[0].size() != size_t(n) * row ||
        reply.payloads[1].size() != size_t(n) * row) {
      session_->malformed("cache", "k and v must be two payloads of length " + std::to_string(n) +
                                       " x " + std::to_string(row) + " bytes");
    }
    CacheSnapshot snap;
    if (const std::string why =
            wire::parse_cache_positions(reply.control, int(n), config_.max_pos, snap.positions);
        !why.empty())
      session_->malformed("cache", why);
    snap.dtype = KvDtype::kF32;  // v1 carries the stored values widened to f32
    snap.length = int(n);
    snap.n_kv_heads = config_.n_kv_heads;
    snap.head_dim = config_.head_dim;
    snap.k = reply.payloads[0];
    snap.v = reply.payloads[1];
    return snap;
  }

  PoolReport pool() const override { return checked_pool(call({{"op", "pool"}, {"engine", id_}})); }

  std::string unheld_storage_check() const override {
    const Reply reply = call({{"op", "storage_check"}, {"engine", id_}});
    const auto problem = reply.control.find("problem");
    if (problem == reply.control.end() || !problem->is_string())
      session_->malformed("storage_check", "\"problem\" must be a string");
    return problem->get<std::string>();
  }

  MemoryReport memory() const override { return {}; }

 private:
  struct PostedStep {
    std::vector<BatchEntry> batch;  // [entry], tokens pointing into the caller's scenario
    size_t bytes = 0;               // the logits it owes
    std::vector<SequenceId> watch;  // post_watched_step: the sequences whose state it carries
    bool watched = false;
    bool shares_before = false;  // its state before is the step before's state after
  };

  Reply call(const json& request, size_t max_payloads = 0, size_t max_bytes = 0) const {
    ++requests_;
    return session_->call(generation_, request, max_payloads, max_bytes);
  }

  // A request whose reply carries nothing (protocol 2): its refusal fails
  // the next call that waits.
  void post(const json& request) {
    ++requests_;
    session_->post(generation_, request);
  }

  // Sends a step without waiting; its reply is kept under the engine's id.
  void post_step_request(std::span<const BatchEntry> batch, std::span<const SequenceId> watch) {
    PostedStep step{std::vector<BatchEntry>(batch.begin(), batch.end()), 0,
                    std::vector<SequenceId>(watch.begin(), watch.end())};
    const json request = step_request(batch, step.bytes);
    ++requests_;
    session_->post_kept(generation_, id_, request, {1, step.bytes});
    posted_.push_back(std::move(step));
  }

  // A watched step: every reply it owes (the state before it, unless the
  // step before left it in carried_, its own and the state after it) is
  // read before anything is thrown, so none is left behind.
  void collect_watched(const PostedStep& step, std::vector<float>& logits,
                       std::optional<StepStates>& states) {
    StepStates got;
    std::exception_ptr before_error, reply_error, after_error;
    try {
      got.before = step.shares_before ? take_carried() : take_queries(step.watch.size());
    } catch (...) {
      before_error = std::current_exception();
    }
    Reply reply;
    try {
      reply = session_->take_kept(generation_, id_, "step");
    } catch (...) {
      reply_error = std::current_exception();
    }
    try {
      got.after = take_queries(step.watch.size());
    } catch (const std::exception& e) {
      got.unreadable = e.what();
      after_error = std::current_exception();
    }
    const bool next_shares = !posted_.empty() && posted_.front().shares_before;
    if (next_shares && got.after) carried_ = *got.after;
    if (before_error) std::rethrow_exception(before_error);
    if (reply_error) std::rethrow_exception(reply_error);
    // The next step's state before it is this one's after: unread, it fails
    // this step, which took it.
    if (!reply.error && next_shares && after_error) std::rethrow_exception(after_error);
    states = std::move(got);
    Session::throw_if_error("step", reply);
    take_logits(reply, step.batch, step.bytes, logits);
  }

  EngineState take_carried() {
    if (!carried_) throw std::logic_error("exec: the state after the step before was not read");
    return *std::exchange(carried_, std::nullopt);
  }

  int checked_length(const Reply& reply) const {
    const int64_t n = session_->field(reply.control, "length", "length");
    if (n < 0 || n > options_.capacity)
      session_->malformed("length", "length " + std::to_string(n) + " outside [0, capacity " +
                                        std::to_string(options_.capacity) + "]");
    return int(n);
  }

  PoolReport checked_pool(const Reply& reply) const {
    PoolReport report;
    if (const std::string why = wire::parse_pool_reply(reply.control, report); !why.empty())
      session_->malformed("pool", why);
    return report;
  }

  // The tag the state queries' replies are kept under: not the engine's own, which its
  // posted steps use.
  int64_t state_tag() const { return -id_; }

  void post_queries(std::span<const SequenceId> sequences) const {
    session_->post_kept(generation_, state_tag(), {{"op", "pool"}, {"engine", id_}}, {});
    for (const SequenceId id : sequences)
      session_->post_kept(generation_, state_tag(),
                          {{"op", "length"}, {"engine", id_}, {"sequence", id}}, {});
  }

  // Every reply is taken before an error is raised, so none is left behind.
  EngineState take_queries(size_t lengths) const {
    const Reply pool = session_->take_kept(generation_, state_tag(), "pool");
    std::vector<Reply> replies;  // [lengths]
    for (size_t k = 0; k < lengths; ++k)
      replies.push_back(session_->take_kept(generation_, state_tag(), "length"));
    EngineState out;
    try {
      Session::throw_if_error("pool", pool);
      out.pool = checked_pool(pool);
    } catch (const EngineError&) {
    }
    for (const Reply& reply : replies) {
      Session::throw_if_error("length", reply);
      out.lengths.push_back(checked_length(reply));
    }
    return out;
  }

  // The request of a step, and in `bytes` the size of the logits it owes.
  json step_request(std::span<const BatchEntry> batch, size_t& bytes) const {
    json entries = json::array();
    size_t tokens = 0;
    for (const BatchEntry& b : batch) {
      entries.push_back({{"sequence", b.sequence},
                         {"tokens", std::vector<int32_t>(b.tokens.begin(), b.tokens.end())}});
      tokens += b.tokens.size();
    }
    bytes = tokens * size_t(config_.vocab) * sizeof(float);
    return {{"op", "step"}, {"engine", id_}, {"entries", std::move(entries)}};
  }

  // Checks a step reply against its batch and takes its logits.
  void take_logits(const Reply& reply, std::span<const BatchEntry> batch, size_t bytes,
                   std::vector<float>& logits) {
    if (reply.payloads.size() != 1 || reply.payloads[0].size() != bytes) {
      session_->malformed(
          "step",
          "logits of " +
              (reply.payloads.empty() ? std::string("no payload")
                                      : std::to_string(reply.payloads[0].size()) + " bytes") +
              " where " + std::to_string(bytes / (size_t(config_.vocab) * sizeof(float))) +
              " tokens x vocab " + std::to_string(config_.vocab) + " need " +
              std::to_string(bytes));
    }
    std::vector<int> reused;  // [entry]
    if (const std::string why = wire::parse_step_reused(reply.control, batch, reused); !why.empty())
      session_->malformed("step", why);
    for (size_t i = 0; i < batch.size(); ++i) reused_[batch[i].sequence] = reused[i];
    logits.resize(bytes / sizeof(float));
    std::memcpy(logits.data(), reply.payloads[0].data(), bytes);
  }

  std::shared_ptr<Session> session_;
  Config config_;
  EngineOptions options_;
  std::string name_;
  std::string model_key_;  // ModelFolder::key of its model
  int generation_ = 0;
  int64_t id_ = 0;
  int64_t model_id_ = 0;                // the child's id of its model
  std::set<SequenceId> live_;           // sequences started and not finished (protocol 2)
  std::map<SequenceId, int> reused_;    // [sequence] cached tokens of its last step
  std::deque<PostedStep> posted_;       // steps posted and not yet collected, oldest first
  mutable uint64_t requests_ = 0;       // requests sent: a watched step's state may be shared
  uint64_t watched_at_ = 0;             // requests_ after the last watched step went out
  std::optional<EngineState> carried_;  // the last collected step's state after, for the next
};

}  // namespace

namespace {

// The engine factory of an exec: backend: a named type, so that
// exec_child_generation finds its session behind an EngineFactory.
struct ExecFactory {
  std::shared_ptr<Session> session;
  std::string name;

  std::unique_ptr<Engine> operator()(const Config& config, const Weights& weights,
                                     const EngineOptions& options) const {
    return std::make_unique<ExecEngine>(session, config, weights, options, name);
  }
};

// An option of the backend string, else its environment variable: the text
// and where it came from (for the error message), or nothing.
std::optional<std::pair<std::string, std::string>> exec_setting(const BackendSpec& spec,
                                                                const std::string& key,
                                                                const char* variable) {
  if (auto it = spec.options.find(key); it != spec.options.end())
    return std::pair{it->second, "--backend " + spec.name + "?" + key + "="};
  if (const char* env = std::getenv(variable); env && *env)
    return std::pair{std::string(env), std::string(variable) + "="};
  return std::nullopt;
}

// A number in [low, high] (low itself only where `low_allowed`).
double setting_number(const std::pair<std::string, std::string>& setting, double low, double high,
                      bool low_allowed, const std::string& expected) {
  const auto& [text, where] = setting;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  const bool in_range = (low_allowed ? x >= low : x > low) && x <= high;
  if (end == text.c_str() || *end != '\0' || !in_range)
    throw InputError(where + text + ": expected " + expected);
  return x;
}

}  // namespace

ChildWaits exec_waits(const BackendSpec& spec) {
  ChildWaits waits;
  double seconds = kDefaultTimeoutSeconds;
  if (const auto timeout = exec_setting(spec, "timeout", "KVCHECK_EXEC_TIMEOUT"))
    seconds = setting_number(*timeout, 0, 86400, false, "seconds in (0, 86400]");
  waits.timeout = std::chrono::milliseconds(int64_t(seconds * 1000));
  waits.spin = wire::default_spin();
  if (const auto spin = exec_setting(spec, "spin", "KVCHECK_EXEC_SPIN"))
    waits.spin = exec_spin(spin->first, spin->second);
  return waits;
}

std::chrono::microseconds exec_spin(const std::string& text, const std::string& where) {
  return std::chrono::microseconds(
      int64_t(setting_number({text, where}, 0, 100000, true, "microseconds in [0, 100000]")));
}

namespace {

// A child that declares fork, truncate, pool_report, storage_check, erase,
// shift or prefix_cache (probed with flush) must
// answer them: checked once, at resolve, so that a contradiction exits 2 with
// the child's refusal (as a plugin's declared but NULL function does) instead
// of failing every case that draws the operation. The probe creates an
// engine on a tiny model the traits accept, asks it to fork and truncate a
// sequence it never started, and for its pool and storage check (which a
// contiguous engine answers too): a child that offers the operation answers
// or refuses with unknown_sequence (any kind but the two below), one that
// lacks it refuses with unsupported or input. It starts nothing and feeds no
// step, so it costs no forward pass and leaves alone the starts and steps a
// test child counts. Any other failure here is left to the properties, which
// report it with a case file.
void probe_declared_operations(const std::string& spec, const std::shared_ptr<Session>& session,
                               const EngineTraits& traits) {
  const OperationTraits& ops = traits.operations;
  if (!ops.fork && !ops.truncate && !ops.pool_report && !ops.storage_check && !ops.erase &&
      !ops.shift && !ops.prefix_cache) {
    return;
  }
  constexpr SequenceId kNeverStarted = 987654321;
  EngineOptions options;
  options.capacity = 4;
  options.max_rows = 2;
  options.kv_dtype = traits.limits.kv_dtypes.empty() ? KvDtype::kF32 : traits.limits.kv_dtypes[0];
  for (const Config& config : {llama_tiny(), gpt2_tiny()}) {
    if (!traits.refuses(config, options.kv_dtype, options.capacity, options.max_rows).empty())
      continue;
    std::unique_ptr<ExecEngine> engine;
    try {
      engine =
          std::make_unique<ExecEngine>(session, config, init_weights(config, 1), options, "probe");
    } catch (const std::exception&) {
      return;  // not about the operations: the properties will see it
    }
    for (const std::string op :
         {"fork", "truncate", "pool_report", "storage_check", "erase", "shift", "flush"}) {
      try {
        if (op == "fork" && ops.fork) engine->fork(kNeverStarted, 0);
        if (op == "truncate" && ops.truncate) engine->truncate(kNeverStarted, 0);
        if (op == "erase" && ops.erase) engine->erase(kNeverStarted, 0, 0);
        if (op == "shift" && ops.shift) engine->shift(kNeverStarted, 0, 0, 0);
        if (op == "pool_report" && ops.pool_report) engine->pool();
        if (op == "storage_check" && ops.storage_check) engine->unheld_storage_check();
        if (op == "flush" && ops.prefix_cache) engine->flush_prefix_cache();
      } catch (const NotOffered& e) {
        const std::string trait = op == "flush" ? "prefix_cache" : op;
        throw InputError("--backend " + spec + ": traits.operations." + trait +
                         " is true, but the child refused " + (op == "pool_report" ? "pool" : op) +
                         ": " + e.what());
      } catch (const std::exception&) {
        // The refusal a child that offers it owes, or a dead child (the
        // properties report that).
      }
    }
    return;
  }
}

Backend exec_backend(const BackendSpec& spec) {
  reject_unknown_options(spec, {"timeout", "spin"});
  const std::string command = spec.name.substr(std::strlen("exec:"));
  if (command.find_first_not_of(" \t") == std::string::npos)
    throw InputError("--backend exec: needs a command, e.g. exec:'python3 engine.py'");
  auto session = std::make_shared<Session>(command, exec_waits(spec));
  json traits_json;
  try {
    traits_json = session->handshake();
  } catch (const std::runtime_error& e) {
    throw InputError(std::string("--backend ") + spec.name + ": handshake failed: " + e.what());
  }
  Result<EngineTraits> traits = traits_from_json(traits_json);
  if (!traits.ok()) throw InputError("--backend " + spec.name + ": " + traits.error());
  if (traits.value().operations.fault_switches) {
    throw InputError("--backend " + spec.name +
                     ": traits.operations.fault_switches is true, but the protocol carries no "
                     "fault switches (put seeded bugs in the command's arguments instead)");
  }
  if (traits.value().operations.storage_map) {
    throw InputError("--backend " + spec.name +
                     ": traits.operations.storage_map is true, but the protocol has no storage "
                     "introspection message");
  }
  probe_declared_operations(spec.name, session, traits.value());
  Backend b;
  b.traits = traits.value();
  const std::string name = b.traits.identity.name;
  b.make_factory = [session, name](FaultSet) -> EngineFactory {
    return ExecFactory{session, name};
  };
  return b;
}

}  // namespace

std::optional<int> exec_child_generation(const EngineFactory& factory) {
  const ExecFactory* exec = factory.target<ExecFactory>();
  if (exec == nullptr) return std::nullopt;
  return exec->session->generation();
}

void register_exec_backend(BackendRegistry& registry) {
  registry.add_prefix(
      "exec:",
      "an engine in another process, over docs/ENGINE_PROTOCOL.md "
      "(exec:'CMD ARGS'[?OPTIONS]: timeout=SECONDS, spin=MICROSECONDS, joined by &)",
      exec_backend);
}

}  // namespace kvcheck
