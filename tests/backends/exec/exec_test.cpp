// The exec backend against kvcheck-serve: the in-tree engine behind the
// protocol must give the in-process engine's bits, and a child that dies,
// hangs or writes garbage must fail the call with a message saying so (and
// the next engine must work again).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/registry.h"
#include "engine/pipeline.h"
#include "model/weights.h"
#include "properties/property.h"
#include "properties/runner.h"
#include "properties/scenario.h"
#include "tests/backends/offload_round_trip.h"
#include "tests/backends/operation_faults.h"
#include "tests/backends/save_restore_round_trip.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck {
namespace {

const std::string kServe = std::string("exec:") + KVCHECK_SERVE;

Config gqa_llama() {
  Config c = llama_tiny();
  c.n_kv_heads = c.n_heads / 2;
  return c;
}

// Two sequences: a ragged prefill batch, then decodes; every logit and every
// cached K/V value compared bit for bit.
void expect_same_bits(const Config& config, KvDtype dtype) {
  const Weights weights = init_weights(config, 7);
  EngineOptions options;
  options.capacity = 16;
  options.max_rows = 3;
  options.kv_dtype = dtype;
  auto a = backend_registry().resolve("cpu").under_test().factory(config, weights, options);
  auto b = backend_registry().resolve(kServe).under_test().factory(config, weights, options);
  const SequenceId a1 = a->start(), a2 = a->start(), b1 = b->start(), b2 = b->start();
  const std::vector<int32_t> p1 = {1, 5, 2, 7, 3}, p2 = {4, 0, 6}, d = {2};
  std::vector<float> la, lb;
  for (int round = 0; round < 3; ++round) {
    const bool prefill = round == 0;
    const std::vector<BatchEntry> ea = {{a1, prefill ? p1 : d}, {a2, prefill ? p2 : d}};
    const std::vector<BatchEntry> eb = {{b1, prefill ? p1 : d}, {b2, prefill ? p2 : d}};
    a->step(ea, la);
    b->step(eb, lb);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << round;
  }
  EXPECT_EQ(a->length(a1), b->length(b1));
  for (int layer = 0; layer < config.n_layers; ++layer) {
    const CacheSnapshot ca = a->cache(a1, layer), cb = b->cache(b1, layer);
    ASSERT_EQ(ca.length, cb.length);
    for (int pos = 0; pos < ca.length; ++pos)
      for (int h = 0; h < config.n_kv_heads; ++h)
        for (int i = 0; i < config.head_dim; ++i) {
          const float ka = ca.k_at(pos, h, i), kb = cb.k_at(pos, h, i);
          const float va = ca.v_at(pos, h, i), vb = cb.v_at(pos, h, i);
          ASSERT_EQ(0, std::memcmp(&ka, &kb, 4)) << layer << " " << pos;
          ASSERT_EQ(0, std::memcmp(&va, &vb, 4)) << layer << " " << pos;
        }
  }
  b->finish(b1);
  EXPECT_THROW(b->length(b1), EngineError);
}

TEST(ExecServe, SameBitsAsInProcess) {
  expect_same_bits(gpt2_tiny(), KvDtype::kF32);
  expect_same_bits(gqa_llama(), KvDtype::kF32);
  expect_same_bits(gqa_llama(), KvDtype::kBF16);
}

Scenario two_sequences(const Config& config) {
  Scenario s;
  s.config = config;
  s.capacity = 12;
  s.max_rows = 2;
  s.sequences = {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10}};
  s.calls = {Call::start(0),
             Call::start(1),
             Call::step({{0, 4}, {1, 2}}),
             Call::step({{0, 1}, {1, 2}}),
             Call::finish(1),
             Call::step({{0, 1}})};
  return s;
}

// Protocol 2 (kvcheck names the ids, start/finish/reset/load go out without
// waiting) and protocol 1 (a child that offers only 1) both pass.
TEST(ExecServe, PropertiesPassThroughExec) {
  for (const std::string& backend : {kServe, kServe + " --protocol 1"}) {
    const EngineUnderTest subject = backend_registry().resolve(backend).under_test();
    for (const Config& c : {gpt2_tiny(), gqa_llama()}) {
      const Scenario s = two_sequences(c);
      ASSERT_EQ("", s.validate());
      for (Property p : {Property::kOracle, Property::kCacheState, Property::kCompaction,
                         Property::kReset, Property::kCapacity}) {
        const Verdict v = check_property(p, s, subject);
        EXPECT_TRUE(v.passed) << backend << " " << property_name(p) << ": " << v.summary;
      }
    }
  }
}

TEST(ExecServe, RefusalsAreTypedErrors) {
  const Config config = gpt2_tiny();
  const Weights weights = init_weights(config, 3);
  EngineOptions options;
  options.capacity = 4;
  options.max_rows = 1;
  auto e = backend_registry().resolve(kServe).under_test().factory(config, weights, options);
  const SequenceId s = e->start();
  const std::vector<int32_t> five = {1, 2, 3, 4, 5}, bad = {1000};
  std::vector<float> logits;
  const auto kind_of = [&](auto&& f) {
    try {
      f();
    } catch (const EngineError& err) {
      return int(err.kind());
    }
    return -1;
  };
  EXPECT_EQ(int(EngineError::Kind::kCapacity), kind_of([&] {
              e->step(std::vector<BatchEntry>{{s, five}}, logits);
            }));
  EXPECT_EQ(int(EngineError::Kind::kBadToken), kind_of([&] {
              e->step(std::vector<BatchEntry>{{s, bad}}, logits);
            }));
  EXPECT_EQ(int(EngineError::Kind::kRows), kind_of([&] { e->start(); }));
  EXPECT_EQ(int(EngineError::Kind::kUnknownSequence), kind_of([&] { e->length(s + 99); }));
  EXPECT_EQ(0, e->length(s));  // every refusal left the state alone
}

// The message of the exception the first step throws on a proxy that
// misbehaves there; afterwards a new engine must work (a fresh child).
std::string fault_message(const std::string& fault, const std::string& options = "") {
  const Backend backend = backend_registry().resolve(
      std::string("exec:python3 ") + KVCHECK_SOURCE_DIR + "/tests/tools/faulty_proxy.py --fault " +
      fault + " --at 1 -- " + KVCHECK_SERVE + options);
  const Config config = gpt2_tiny();
  const Weights weights = init_weights(config, 5);
  const EngineFactory factory = backend.under_test().factory;
  auto e = factory(config, weights, EngineOptions{});
  const SequenceId s = e->start();
  const std::vector<int32_t> tokens = {1, 2};
  std::vector<float> logits;
  std::string message;
  try {
    e->step(std::vector<BatchEntry>{{s, tokens}}, logits);
  } catch (const EngineError& err) {
    ADD_FAILURE() << "a child fault is not a refusal: " << err.what();
  } catch (const std::runtime_error& err) {
    message = err.what();
  }
  EXPECT_THROW(e->length(s), std::runtime_error);  // its child is gone
  auto fresh = factory(config, weights, EngineOptions{});
  EXPECT_EQ(0, fresh->length(fresh->start())) << "the next engine gets a new child";
  return message;
}

TEST(ExecFaults, ExitIsReportedWithCodeAndStderr) {
  const std::string m = fault_message("exit");
  EXPECT_NE(m.find("step: the child exited with code 3"), std::string::npos) << m;
  EXPECT_NE(m.find("faulty_proxy: exit now"), std::string::npos) << m;
}

TEST(ExecFaults, SignalIsReported) {
  const std::string m = fault_message("signal");
  EXPECT_NE(m.find("killed by signal 15"), std::string::npos) << m;
}

TEST(ExecFaults, HangTimesOut) {
  const std::string m = fault_message("hang", "?timeout=4");
  EXPECT_NE(m.find("no reply within 4000 ms"), std::string::npos) << m;
}

TEST(ExecFaults, GarbageIsMalformed) {
  const std::string m = fault_message("garbage");
  EXPECT_NE(m.find("malformed reply: a control frame of 2147483647 bytes"), std::string::npos) << m;
  EXPECT_NE(fault_message("bad_json").find("not a JSON object"), std::string::npos);
  EXPECT_NE(fault_message("short_payload").find("logits of 4 bytes"), std::string::npos);
}

// Protocol 2 sends start without waiting where a row is free; an engine that
// refuses it anyway fails the next call, naming the start and the refusal.
TEST(ExecFaults, RefusedStartSentAheadFailsTheNextCall) {
  const Backend backend = backend_registry().resolve(
      std::string("exec:python3 ") + KVCHECK_SOURCE_DIR +
      "/tests/tools/faulty_proxy.py --fault refuse_start -- " + KVCHECK_SERVE);
  const Config config = gpt2_tiny();
  const Weights weights = init_weights(config, 5);
  auto e = backend.under_test().factory(config, weights, EngineOptions{});
  const SequenceId s = e->start();  // sent without waiting: no error yet
  std::string message;
  try {
    e->length(s);
  } catch (const EngineError& err) {
    ADD_FAILURE() << "a refusal sent ahead is not the next call's refusal: " << err.what();
  } catch (const std::runtime_error& err) {
    message = err.what();
  }
  EXPECT_NE(message.find("start (sent without waiting) was refused: rows: faulty_proxy refuses"),
            std::string::npos)
      << message;
}

// Protocol 2 sends a fork of a live parent where a row is free, and a
// truncate of a live sequence, without waiting: an engine that refuses one
// fails the next call, which names it. A fork of a parent the engine never
// started still waits, for the typed refusal (the resolve probe relies on it).
TEST(ExecServe, RefusedForkAndTruncateSentAheadFailTheNextCall) {
  const Config config = gpt2_tiny();
  const Weights weights = init_weights(config, 5);
  EngineOptions options;
  options.capacity = 8;
  options.max_rows = 3;
  const EngineFactory factory = backend_registry().resolve(kServe).under_test().factory;
  for (const std::string op : {"fork", "truncate"}) {
    auto e = factory(config, weights, options);
    const SequenceId s = e->start();
    std::vector<float> logits;
    e->step(std::vector<BatchEntry>{{s, std::vector<int32_t>{1, 2}}}, logits);
    if (op == "fork")
      e->fork(s, 5);  // past the parent's 2 tokens: sent without waiting, no error yet
    else
      e->truncate(s, 5);
    std::string message;
    try {
      e->length(s);
    } catch (const EngineError& err) {
      ADD_FAILURE() << op << ": a refusal sent ahead is not the next call's: " << err.what();
    } catch (const std::runtime_error& err) {
      message = err.what();
    }
    EXPECT_NE(message.find(op + " (sent without waiting) was refused"), std::string::npos)
        << message;
  }
  auto e = factory(config, weights, options);
  EXPECT_THROW(e->fork(987654321, 0), EngineError);
}

// A run without a hook posts its steps (Pipeline::post_step) and reads their
// logits at the end: the same logits as a run that waits for each step (a
// hook forces that), and a step that fails is reported at its own call, with
// its kind, as a waiting run reports it.
TEST(ExecServe, StepsSentAheadGiveTheWaitingRunsLogitsAndFailures) {
  const Scenario s = test::rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32);
  ASSERT_EQ("", s.validate());
  const Weights weights = init_weights(s.config, s.weight_seed);
  const CallHook wait_for_each = [](int, const ScenarioRunner&) { return true; };
  // A child each (a new timeout makes a new backend): a proxy counts steps.
  const auto runs = [&](const std::string& backend) {
    const auto factory = [&](const char* timeout) {
      return backend_registry().resolve(backend + timeout).under_test().factory;
    };
    return std::pair{run_scenario(s, weights, factory("?timeout=30")),
                     run_scenario(s, weights, factory("?timeout=31"), wait_for_each)};
  };
  // Protocol 2 posts steps (protocol 1 cannot: the child names the ids).
  EngineOptions options;
  options.capacity = s.capacity;
  options.max_rows = s.max_rows;
  for (const bool v1 : {false, true}) {
    auto e = backend_registry()
                 .resolve(kServe + (v1 ? " --protocol 1" : ""))
                 .under_test()
                 .factory(s.config, weights, options);
    const SequenceId id = e->start();
    const std::vector<int32_t> tokens = {1, 2, 3};
    std::vector<float> posted, waited;
    Pipeline* pipeline = e->pipeline();
    ASSERT_EQ(pipeline != nullptr, !v1);
    if (v1) continue;
    pipeline->post_step(std::vector<BatchEntry>{{id, tokens}});
    std::optional<StepStates> unwatched;
    pipeline->collect_step(posted, unwatched);
    EXPECT_FALSE(unwatched);
    e->truncate(id, 3);
    e->step(std::vector<BatchEntry>{{id, tokens}}, waited);
    EXPECT_EQ(posted, waited);
  }
  const auto [ahead, waiting] = runs(kServe);
  ASSERT_FALSE(ahead.engine_failed) << ahead.error_message;
  EXPECT_EQ(ahead.logits, waiting.logits);
  EXPECT_EQ(
      ahead.logits,
      run_scenario(s, weights, backend_registry().resolve("cpu").under_test().factory).logits);

  const std::string proxy =
      std::string("exec:python3 ") + KVCHECK_SOURCE_DIR + "/tests/tools/faulty_proxy.py --fault ";
  // The fifth step is call 9, after a finish and a start not waited for either.
  const auto [refused, refused_waiting] = runs(proxy + "refuse_step --at 5 -- " + KVCHECK_SERVE);
  for (const RunResult& r : {refused, refused_waiting}) {
    EXPECT_TRUE(r.engine_failed && !r.threw);
    EXPECT_EQ(r.failed_call, 9);
    EXPECT_EQ(r.error_kind, EngineError::Kind::kCapacity);
    EXPECT_NE(r.error_message.find("faulty_proxy refuses"), std::string::npos) << r.error_message;
  }
  const auto [died, died_waiting] = runs(proxy + "exit --at 2 -- " + KVCHECK_SERVE);
  for (const RunResult& r : {died, died_waiting}) {
    EXPECT_TRUE(r.engine_failed && r.threw);
    EXPECT_EQ(r.failed_call, 3);
    EXPECT_NE(r.error_message.find("the child exited with code 3"), std::string::npos)
        << r.error_message;
  }
}

// A run of `s` through a proxy that logs each request as it arrives, and the
// steps that had reached the child when the meanwhile work ran. Delivery is
// asynchronous: the meanwhile waits up to 20 s for `expected` of them, then
// 50 ms more, room for a stray later one to show.
struct LoggedRun {
  RunResult run;
  size_t steps_seen = 0;
  int meanwhiles = 0;
};

// kvcheck-serve behind a proxy that logs each request's op to `log` as it
// arrives.
EngineFactory logged_factory(const std::filesystem::path& log) {
  std::filesystem::remove(log);
  return backend_registry()
      .resolve(std::string("exec:python3 ") + KVCHECK_SOURCE_DIR +
               "/tests/tools/faulty_proxy.py --fault none --log " + log.string() + " -- " +
               KVCHECK_SERVE)
      .under_test()
      .factory;
}

// Requests of `op` the child has received, by the proxy's log.
size_t ops_logged(const std::filesystem::path& log, const std::string& op) {
  std::ifstream in(log);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line == op;
  return n;
}

LoggedRun run_logged(const Scenario& s, const Weights& weights, size_t expected) {
  const std::filesystem::path log =
      std::filesystem::temp_directory_path() / ("kvcheck-logged-" + std::to_string(::getpid()));
  const EngineFactory factory = logged_factory(log);
  const auto steps_logged = [&] { return ops_logged(log, "step"); };
  LoggedRun logged;
  logged.run = run_scenario(s, weights, factory, {}, [&] {
    ++logged.meanwhiles;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (steps_logged() < expected && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    logged.steps_seen = steps_logged();
  });
  std::filesystem::remove(log);
  return logged;
}

// Bit for bit (the logits of prefix hits are NaN on both sides).
void expect_in_process_logits(const Scenario& s, const Weights& weights, const RunResult& run) {
  const RunResult in_process =
      run_scenario(s, weights, backend_registry().resolve("cpu").under_test().factory);
  ASSERT_EQ(run.logits.size(), in_process.logits.size());
  for (size_t q = 0; q < run.logits.size(); ++q)
    EXPECT_EQ(first_bit_difference(run.logits[q], in_process.logits[q]), std::nullopt) << "s" << q;
}

// The steps a run sends without waiting reach the child before the work its
// caller does meanwhile (P1 computes the oracle then), so the two overlap
// instead of taking turns; the logits are the same.
TEST(ExecServe, PostedStepsReachTheChildBeforeTheMeanwhileWork) {
  const Scenario s = test::rich_scenario(Family::kGpt2, 2, 2, KvDtype::kF32);
  const Weights weights = init_weights(s.config, s.weight_seed);
  const size_t steps = size_t(std::count_if(
      s.calls.begin(), s.calls.end(), [](const Call& c) { return c.kind == Call::Kind::kStep; }));
  ASSERT_GT(steps, 2u);
  const LoggedRun logged = run_logged(s, weights, steps);
  EXPECT_EQ(logged.steps_seen, steps) << "steps the child had received when the meanwhile ran";
  ASSERT_FALSE(logged.run.engine_failed) << logged.run.error_message;
  expect_in_process_logits(s, weights, logged.run);
}

// In a pool that may run dry the steps posted are read back before a call
// whose outcome a refusal could change (here the flush; a start, finish or
// reset goes out without reading them): the meanwhile work goes before that
// first wait, after the steps ahead of it, not after the last call.
TEST(ExecServe, InAPoolThatMayRunDryTheMeanwhileWorkGoesBeforeTheFirstWait) {
  const Scenario s = test::prefix_scenario(Family::kGpt2, 1, 30);
  ASSERT_EQ(s.validate(), "");
  size_t ahead = 0, steps = 0;  // steps before the first flush, and in all
  bool flushed = false;
  for (const Call& call : s.calls) {
    flushed = flushed || call.kind == Call::Kind::kFlush;
    if (call.kind == Call::Kind::kStep) ++steps, ahead += !flushed;
  }
  ASSERT_TRUE(flushed);
  ASSERT_LT(ahead, steps);
  const Weights weights = init_weights(s.config, s.weight_seed);
  const LoggedRun logged = run_logged(s, weights, ahead);
  EXPECT_EQ(logged.meanwhiles, 1);
  EXPECT_EQ(logged.steps_seen, ahead) << "steps the child had received when the meanwhile ran";
  ASSERT_FALSE(logged.run.engine_failed || logged.run.refused) << logged.run.error_message;
  expect_in_process_logits(s, weights, logged.run);
}

// An engine's load and create go out when it is made, not with its first
// call that waits, so that the child loads the model while kvcheck builds
// the run's requests.
TEST(ExecServe, AnEngineGoesOutWhenItIsMadeSoTheChildLoadsMeanwhile) {
  const std::filesystem::path log =
      std::filesystem::temp_directory_path() / ("kvcheck-made-" + std::to_string(::getpid()));
  const EngineFactory factory = logged_factory(log);
  const Config config = test::small_config(Family::kLlama, 1, 2, 1);
  const size_t loads = ops_logged(log, "load"), creates = ops_logged(log, "create");
  EngineOptions options;
  options.capacity = 16;
  const std::unique_ptr<Engine> engine = factory(config, init_weights(config, 4242), options);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ops_logged(log, "create") == creates && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(ops_logged(log, "load"), loads + 1);
  EXPECT_EQ(ops_logged(log, "create"), creates + 1);
  std::filesystem::remove(log);
}

// More steps posted than kvcheck leaves unread (64), whose logits (200 KiB)
// are more than a pipe holds: they are read as they come, and come back in
// order.
TEST(ExecServe, ManyPostedStepsComeBackInOrder) {
  Config config = llama_tiny();
  config.vocab = 512;
  const Weights weights = init_weights(config, 4);
  EngineOptions options;
  options.capacity = 200;
  const EngineFactory factory = backend_registry().resolve(kServe).under_test().factory;
  auto ahead = factory(config, weights, options), waiting = factory(config, weights, options);
  const SequenceId a = ahead->start(), w = waiting->start();
  std::vector<std::vector<int32_t>> tokens;  // [step] two tokens
  for (int i = 0; i < 100; ++i) tokens.push_back({i % 512, (7 * i) % 512});
  Pipeline* pipeline = ahead->pipeline();
  ASSERT_NE(pipeline, nullptr);
  for (const std::vector<int32_t>& t : tokens) pipeline->post_step(std::vector<BatchEntry>{{a, t}});
  std::vector<float> posted, waited;
  std::optional<StepStates> unwatched;
  for (const std::vector<int32_t>& t : tokens) {
    pipeline->collect_step(posted, unwatched);
    waiting->step(std::vector<BatchEntry>{{w, t}}, waited);
    ASSERT_EQ(posted, waited);
  }
  EXPECT_EQ(ahead->length(a), 200);
}

// A create the child refuses is sent without waiting (protocol 2): the next
// call fails naming it, the child stays up (kvcheck-serve used to keep a null
// engine under the refused id and crash on the next request naming it), and
// the next engine works.
TEST(ExecServe, RefusedCreateFailsTheNextCallAndTheChildStaysUp) {
  const Config config = llama_tiny();
  const Weights weights = init_weights(config, 3);
  const EngineFactory factory = backend_registry().resolve(kServe).under_test().factory;
  EngineOptions too_long;
  too_long.capacity = config.max_pos + 1;
  auto refused = factory(config, weights, too_long);
  const SequenceId s = refused->start();
  std::string message;
  try {
    refused->length(s);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("create (sent without waiting) was refused"), std::string::npos)
      << message;
  EXPECT_NE(message.find("capacity: " + std::to_string(config.max_pos + 1) + " is out of range"),
            std::string::npos)
      << message;
  EngineOptions fits;
  fits.capacity = 8;
  auto fresh = factory(config, weights, fits);
  const SequenceId id = fresh->start();
  std::vector<float> logits;
  fresh->step(std::vector<BatchEntry>{{id, std::vector<int32_t>{1, 2}}}, logits);
  EXPECT_EQ(fresh->length(id), 2);
}

// Fork and truncate over the protocol (both versions): the in-process
// engine's bits, and the properties that need them (P11 sharing, P12
// rollback) pass, with the oracle (P1) and the cache (P6) through them.
TEST(ExecServe, ForkAndTruncateThroughExec) {
  for (const std::string& backend : {kServe, kServe + " --protocol 1"}) {
    const Backend b = backend_registry().resolve(backend);
    ASSERT_TRUE(b.traits.operations.fork && b.traits.operations.truncate) << backend;
    const EngineUnderTest subject = b.under_test();
    for (const Family family : {Family::kLlama, Family::kGpt2}) {
      const Scenario s = test::operations_scenario(family, 0, KvDtype::kF32);
      ASSERT_EQ("", s.validate());
      for (Property p :
           {Property::kOracle, Property::kCacheState, Property::kSharing, Property::kRollback}) {
        const Verdict v = check_property(p, s, subject);
        EXPECT_TRUE(v.applicable && v.passed)
            << backend << " " << property_name(p) << ": " << v.summary;
      }
      const Weights weights = init_weights(s.config, s.weight_seed);
      const RunResult a = run_scenario(s, weights, subject.factory);
      const RunResult c =
          run_scenario(s, weights, backend_registry().resolve("cpu").under_test().factory);
      ASSERT_FALSE(a.engine_failed) << a.error_message;
      ASSERT_EQ(a.logits.size(), c.logits.size());
      for (size_t q = 0; q < a.logits.size(); ++q) {
        ASSERT_EQ(a.logits[q].size(), c.logits[q].size());
        EXPECT_EQ(0, std::memcmp(a.logits[q].data(), c.logits[q].data(), a.logits[q].size() * 4))
            << backend << " sequence " << q;
      }
    }
  }
}

// The state around a watched step (a pool that may run dry) goes out with
// the step as a pool query and a length per sequence: it must answer what
// the in-process engine answers, steps back to back share the state between
// them, and a refused query must leave no reply behind for the next call to
// take by mistake.
TEST(ExecServe, WatchedStatesAnswerAsInProcessAndLeaveNoReplyBehind) {
  const Config config = gqa_llama();
  const Weights weights = init_weights(config, 5);
  EngineOptions options;
  options.capacity = 16;
  options.max_rows = 3;
  options.block_size = 2;
  options.pool_blocks = 12;
  auto exec = backend_registry().resolve(kServe).under_test().factory(config, weights, options);
  auto cpu = backend_registry().resolve("cpu").under_test().factory(config, weights, options);
  Pipeline* pipeline = exec->pipeline();
  ASSERT_NE(pipeline, nullptr);
  std::vector<float> logits_exec, logits_cpu;
  std::vector<SequenceId> exec_ids, cpu_ids;
  for (int s = 0; s < 3; ++s) {
    exec_ids.push_back(exec->start()), cpu_ids.push_back(cpu->start());
    const std::vector<int32_t> tokens(size_t(2 * s + 1), 3);
    const BatchEntry a{exec_ids.back(), tokens}, b{cpu_ids.back(), tokens};
    exec->step({&a, 1}, logits_exec), cpu->step({&b, 1}, logits_cpu);
  }
  const auto expect_same = [](const EngineState& x, const EngineState& y) {
    EXPECT_EQ(x.lengths, y.lengths);
    ASSERT_TRUE(x.pool && y.pool);
    EXPECT_EQ(x.pool->free, y.pool->free);
    EXPECT_EQ(x.pool->used, y.pool->used);
    EXPECT_EQ(x.pool->refcounts, y.pool->refcounts);
    EXPECT_EQ(x.pool->tables.size(), y.pool->tables.size());
  };
  // Two watched steps back to back: the second's state before is the
  // first's after (one query set between them), each as in process.
  const std::vector<int32_t> more{4, 5};
  std::vector<std::optional<StepStates>> states(2);
  const EngineState before = read_state(*cpu, cpu_ids);
  for (const SequenceId id : {exec_ids[0], exec_ids[1]})
    pipeline->post_watched_step(std::vector<BatchEntry>{{id, more}}, exec_ids);
  for (size_t k = 0; k < 2; ++k) {
    pipeline->collect_step(logits_exec, states[k]);
    const BatchEntry b{cpu_ids[k], more};
    cpu->step({&b, 1}, logits_cpu);
    EXPECT_EQ(logits_exec, logits_cpu) << "watched step " << k;
    ASSERT_TRUE(states[k] && states[k]->after) << k;
    expect_same(states[k]->after.value(), read_state(*cpu, cpu_ids));
  }
  expect_same(states[0]->before, before);
  EXPECT_EQ(states[0]->after->lengths, (std::vector<int>{3, 3, 5}));
  expect_same(states[1]->before, *states[0]->after);

  // A length query of a sequence the engine never started is refused: the
  // collect throws, and the step after it gets its own reply.
  const SequenceId unknown = 987654321;
  pipeline->post_watched_step(std::vector<BatchEntry>{{exec_ids[2], more}},
                              std::vector<SequenceId>{exec_ids[0], unknown});
  std::optional<StepStates> refused;
  EXPECT_THROW(pipeline->collect_step(logits_exec, refused), EngineError);
  EXPECT_FALSE(refused) << "a refused state query is not the step's refusal";
  const BatchEntry c{cpu_ids[2], more};
  cpu->step({&c, 1}, logits_cpu);
  const BatchEntry d{exec_ids[2], more}, e{cpu_ids[2], more};
  exec->step({&d, 1}, logits_exec), cpu->step({&e, 1}, logits_cpu);
  EXPECT_EQ(logits_exec, logits_cpu) << "the step after a refused state query";
  EXPECT_EQ(read_state(*exec, exec_ids).lengths, (std::vector<int>{3, 5, 9}));
}

// A pool that runs dry through the protocol, where the state before the
// refused step travels with the step (post_watched_step) and is read only when it
// is refused: the clean refusal stops the check, the refusal that keeps half
// a table is a failure that names both states (as in process,
// Properties.APoolRefusalStopsTheCheckThereAndMustChangeNothing).
void expect_refusal_told_apart(const Scenario& scenario) {
  ASSERT_EQ(scenario.validate(), "");
  const Verdict correct =
      check_property(Property::kOracle, scenario, backend_registry().resolve(kServe).under_test());
  EXPECT_TRUE(correct.passed && correct.applicable) << correct.summary;
  EXPECT_NE(correct.summary.find("the pool ran dry and refused a step"), std::string::npos)
      << correct.summary;
  const Verdict faulty = check_property(
      Property::kOracle, scenario,
      backend_registry().resolve(kServe + " --fault refusal_leaves_half_table").under_test());
  EXPECT_FALSE(faulty.passed);
  EXPECT_NE(faulty.detail.find("changed the engine's state"), std::string::npos) << faulty.detail;
}

TEST(ExecServe, APoolRefusalIsToldApartThroughExec) {
  expect_refusal_told_apart(test::prefix_scenario(Family::kGpt2, 1, 8));
}

// One sequence in a pool of `pool_blocks` blocks of one token each.
Scenario small_pool_scenario(int pool_blocks, std::vector<Call> calls) {
  Scenario s;
  s.config = gpt2_tiny();
  s.weight_seed = 17;
  s.capacity = 10;
  s.max_rows = 2;
  s.block_size = 1;
  s.pool_blocks = pool_blocks;
  s.sequences = {{1, 2, 3, 4, 5, 6}};
  s.calls = std::move(calls);
  return s;
}

// The run through kvcheck-serve stops at a refusal of call `call`, which
// P1 tells apart from a refusal that changed the engine's state.
void expect_refused_at(const Scenario& s, int call) {
  ASSERT_EQ(s.validate(), "");
  const RunResult run = run_scenario(s, init_weights(s.config, s.weight_seed),
                                     backend_registry().resolve(kServe).under_test().factory);
  EXPECT_TRUE(run.refused && !run.engine_failed) << run.error_message;
  EXPECT_EQ(run.refused_call, call);
  expect_refusal_told_apart(s);
}

// Two steps sent back to back share the state between them (the one
// after the first is the one before the second): the pool runs dry at the
// second, and its refusal must still be told apart.
TEST(ExecServe, ARefusalOfAStepAfterAPostedStepIsToldApart) {
  expect_refused_at(small_pool_scenario(4, {Call::start(0), Call::step({{0, 2}}),
                                            Call::step({{0, 3}}), Call::finish(0)}),
                    2);
}

// A truncate or fork after a step that may be refused waits for that step:
// sent ahead of an unseen refusal it would be refused in turn (the refused
// step left fewer tokens than it takes), and its refusal taken for the
// engine's failure. A finish after it goes out without waiting.
TEST(ExecServe, ACallARefusalCouldChangeWaitsForTheStepBeforeIt) {
  expect_refused_at(
      small_pool_scenario(3, {Call::start(0), Call::step({{0, 1}}), Call::step({{0, 3}}),
                              Call::truncate(0, 3), Call::finish(0)}),
      2);
}

// A refusal of a request sent without waiting fails the run that sent it,
// even where nothing after it reads a reply (a finish as the last call, the
// steps waited for by a per-call hook), and never the next run.
TEST(ExecServe, ARefusalSentAheadAsTheLastCallFailsItsOwnRun) {
  const EngineFactory factory =
      backend_registry()
          .resolve(std::string("exec:python3 ") + KVCHECK_SOURCE_DIR +
                   "/tests/tools/faulty_proxy.py --fault refuse_finish -- " + KVCHECK_SERVE)
          .under_test()
          .factory;
  Scenario s;
  s.config = gpt2_tiny();
  s.weight_seed = 17;
  s.capacity = 4;
  s.max_rows = 1;
  s.sequences = {{1, 2, 3}};
  s.calls = {Call::start(0), Call::step({{0, 2}}), Call::finish(0)};
  ASSERT_EQ(s.validate(), "");
  const Weights weights = init_weights(s.config, s.weight_seed);
  const CallHook every_call = [](int, const ScenarioRunner&) { return true; };
  const RunResult refused = run_scenario(s, weights, factory, every_call);
  EXPECT_TRUE(refused.engine_failed) << "the refused finish went unreported";
  EXPECT_NE(refused.error_message.find("finish (sent without waiting) was refused"),
            std::string::npos)
      << refused.error_message;
  const RunResult next = run_scenario(s, weights, factory, every_call);
  EXPECT_FALSE(next.engine_failed) << next.error_message;
  // An engine destroyed before its refusal is read takes the refusal with it
  // (a second child, whose first finish is refused).
  const EngineFactory second =
      backend_registry()
          .resolve(std::string("exec:python3 ") + KVCHECK_SOURCE_DIR +
                   "/tests/tools/faulty_proxy.py --fault refuse_finish --at 2 -- " + KVCHECK_SERVE)
          .under_test()
          .factory;
  EngineOptions options;
  options.capacity = 4;
  std::vector<float> logits;
  {
    auto gone = second(s.config, weights, options);
    const SequenceId id = gone->start();
    gone->step(std::vector<BatchEntry>{{id, std::vector<int32_t>{1}}}, logits);
    gone->finish(id);
  }
  auto fresh = second(s.config, weights, options);
  const SequenceId id = fresh->start();
  EXPECT_NO_THROW(fresh->step(std::vector<BatchEntry>{{id, std::vector<int32_t>{1}}}, logits));
}

// Every fault that lives in an operation (fork, truncate, paged storage,
// the storage check, the prefix cache, sliding windows, erase and shift),
// switched on in the child (the protocol carries no
// fault switches): on its minimal scenario every property gives the in-tree
// verdict through the protocol, and at least one fails; the clean child
// passes the same scenario.
// kvcheck-serve carries offload: the create key host_blocks, the offload
// request and the pool reply's host tier.
TEST(ExecServe, OffloadGivesTheInTreeVerdicts) {
  test::expect_offload_through(backend_registry().resolve(kServe).under_test());
}

// kvcheck-serve carries save and restore: a schedule that saves, changes
// and restores sequences (after a context shift, under a fork) gives every
// property the in-tree verdict through the protocol, and a restore of a
// sequence never saved comes back as the engine's refusal.
TEST(ExecServe, SaveAndRestoreGiveTheInTreeVerdicts) {
  test::expect_save_restore_through(backend_registry().resolve(kServe).under_test());
}

TEST(ExecServe, OperationFaultsAreCaughtThroughExec) {
  test::expect_operation_faults_caught(
      [](const std::string& fault) {
        return backend_registry().resolve(kServe + " --fault " + fault).under_test();
      },
      backend_registry().resolve(kServe).under_test());
}

// Sliding windows, context shifts and divs through the protocol: the config's
// window reaches the child, and the cache reply's "positions" carry a
// wrapped ring's slots and the shifted cells' positions, so every property
// gives the in-process verdict (P6 on the rings needs the positions: the
// snapshot holds fewer slots than tokens). A child that drops the positions
// fails P6 on the rings; one that reports them off by one fails P6 on
// both, the K/V being right.
TEST(ExecServe, WindowsAndContextShiftsGiveTheInTreeVerdicts) {
  const EngineUnderTest serve = backend_registry().resolve(kServe).under_test();
  ASSERT_TRUE(serve.traits.operations.sliding_window);
  const EngineUnderTest cpu = backend_registry().resolve("cpu").under_test();
  const std::string proxy =
      std::string("exec:python3 ") + KVCHECK_SOURCE_DIR + "/tests/tools/faulty_proxy.py --fault ";
  const EngineUnderTest dropped =
      backend_registry().resolve(proxy + "drop_positions -- " + KVCHECK_SERVE).under_test();
  const EngineUnderTest wrong =
      backend_registry().resolve(proxy + "wrong_positions -- " + KVCHECK_SERVE).under_test();
  const Scenario ring = test::window_scenario(Family::kLlama, 3, 2, KvDtype::kF32);
  const Scenario shift = test::context_shift_scenario();
  for (const Scenario& s : {ring, test::window_scenario(Family::kGpt2, 4, 0, KvDtype::kBF16), shift,
                            test::div_scenario()}) {
    ASSERT_EQ("", s.validate());
    for (int p = 0; p < kPropertyCount; ++p) {
      const Verdict a = check_property(Property(p), s, serve);
      const Verdict b = check_property(Property(p), s, cpu);
      SCOPED_TRACE(std::string(property_label(Property(p))) + " on\n" + s.to_text());
      EXPECT_EQ(a.applicable, b.applicable) << a.summary << " vs " << b.summary;
      EXPECT_EQ(a.passed, b.passed) << a.summary << " vs " << b.summary;
      EXPECT_EQ(a.summary, b.summary);
      EXPECT_EQ(a.worst_ratio, b.worst_ratio);
    }
    EXPECT_TRUE(check_property(Property::kCacheState, s, cpu).passed);
  }
  const Verdict no_ring = check_property(Property::kCacheState, ring, dropped);
  EXPECT_FALSE(no_ring.passed) << no_ring.summary;
  EXPECT_NE(no_ring.summary.find("the cache holds 3 positions"), std::string::npos)
      << no_ring.summary;
  // Without positions a context shift's cells are checked by their K/V only.
  EXPECT_TRUE(check_property(Property::kCacheState, shift, dropped).passed);
  for (const Scenario& s : {ring, shift}) {
    const Verdict v = check_property(Property::kCacheState, s, wrong);
    EXPECT_FALSE(v.passed) << s.to_text();
    EXPECT_NE(v.summary.find("position"), std::string::npos) << v.summary;
  }
}

// A child whose traits declare fork but that answers it "unsupported" is
// refused at resolve (exit 2 in the CLI), naming the operation.
TEST(ExecFaults, DeclaredForkAnsweredUnsupportedIsRefusedAtResolve) {
  const std::string backend = std::string("exec:python3 ") + KVCHECK_SOURCE_DIR +
                              "/tests/tools/faulty_proxy.py --fault unsupported_fork -- " +
                              KVCHECK_SERVE;
  try {
    backend_registry().resolve(backend);
    FAIL() << "resolved";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("traits.operations.fork is true, but the child refused fork"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("faulty_proxy: no fork"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kvcheck
