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
#include "backends/exec/exec_probe.h"
#include "backends/exec/exec_session.h"
#include "backends/exec/exec_wire.h"
#include "engine/pipeline.h"
#include "engine/traits_json.h"
#include "model/status.h"
#include "model/weights.h"

namespace kvcheck {

namespace {

using nlohmann::json;

constexpr double kDefaultTimeoutSeconds = 30;

using exec_session::NotOffered;
using exec_session::Session;

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
  SequenceId start() override { return start_keyed(0); }

  // A key goes out as "cache_key"; the child declares operations.cache_keys.
  SequenceId start_keyed(uint64_t cache_key) override {
    json request = {{"op", "start"}, {"engine", id_}};
    if (cache_key != 0) request["cache_key"] = cache_key;
    if (session_->version() < 2) return session_->field(call(request).control, "sequence", "start");
    const SequenceId id = session_->new_id();
    request["sequence"] = id;
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

  void offload(SequenceId sequence) override {
    call({{"op", "offload"}, {"engine", id_}, {"sequence", sequence}});
  }

  void save_state(SequenceId sequence) override {
    call({{"op", "save"}, {"engine", id_}, {"sequence", sequence}});
  }

  void restore_state(SequenceId sequence) override {
    call({{"op", "restore"}, {"engine", id_}, {"sequence", sequence}});
  }

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

  // An engine with an abort path of its own (traits operations.abort) gets
  // "abort"; any other ends the sequence with finish, as its users would.
  void abort(SequenceId sequence) override {
    const json& operations = session_->handshake().value("operations", json::object());
    if (!operations.value("abort", false)) return finish(sequence);
    call({{"op", "abort"}, {"engine", id_}, {"sequence", sequence}});
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

  void div(SequenceId sequence, int p0, int p1, int d) override {
    call(
        {{"op", "div"}, {"engine", id_}, {"sequence", sequence}, {"p0", p0}, {"p1", p1}, {"d", d}});
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
        reply.payloads[0].size() % row != 0 || reply.payloads[1].size() % row != 0) {
      session_->malformed("cache", "k and v must be two payloads of length " + std::to_string(n) +
                                       " x " + std::to_string(row) + " bytes");
    }
    // Whole slots, but not `length` of them: the engine's cache disagrees
    // with itself (a position pointer and the tensors it should count, as
    // the Python helper sends them), which is a cache bug; the child lives.
    const size_t k_slots = reply.payloads[0].size() / row, v_slots = reply.payloads[1].size() / row;
    if (k_slots != size_t(n) || v_slots != size_t(n)) {
      throw EngineInconsistency("exec cache: the reply's length (the engine's length()) is " +
                                std::to_string(n) + ", but its K holds " + std::to_string(k_slots) +
                                " slots and its V " + std::to_string(v_slots) + " (cache())");
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
    return std::pair{it->second, "--backend " + spec.name + ": option " + key + "="};
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
  probe_declared_operations(spec.name, traits.value(),
                            [&](const Config& config, const EngineOptions& options) {
                              return std::make_unique<ExecEngine>(
                                  session, config, init_weights(config, 1), options, "probe");
                            });
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
