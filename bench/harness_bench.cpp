// Harness throughput: how many cases per second each property checks on the
// optimized CPU engine (one thread), and how long the kill matrix's 'any'
// column takes to kill every fault. docs/PERFORMANCE.md, "Harness
// throughput", records the figures and the command.
//
// The cases are a fixed set of scenarios drawn once from the RapidCheck
// generator (properties/rc/generators.h) with a fixed seed, at the sizes a
// RapidCheck run with max size 100 walks through (0, 1, ..., 100, 0, ...), so
// every run of the benchmark times the very same work. One benchmark
// iteration checks the property on every scenario of the set; the counter
// `cases/s` is what the brief calls throughput. P7 draws from the shared-KV-
// heads generator (the one the suite checks it on); the others from the
// every-shape generator.
//
// BM_OracleThroughExec times P1 in process, through exec:kvcheck-serve and on
// the PyTorch engine (docs/PERFORMANCE.md, "The engine protocol").
//
// BM_OracleByPath times P1 on the same engine reached three ways, taking
// turns case by case: the direct factory, the backend registry, and the C
// plugin ABI
// (tests/backends/cpu_plugin.cpp; docs/PERFORMANCE.md, "Registry and plugin
// overhead").
//
//   harness_bench [--benchmark_filter=...]   (KVCHECK_HARNESS_SCENARIOS=N to
//   change the set's size, 200 by default; KVCHECK_BENCH_BACKEND=SPEC for
//   BM_OracleOnBackend, P1 on any backend, e.g. llama.cpp through exec:)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <rapidcheck.h>

#include "backends/in_tree.h"
#include "backends/registry.h"
#include "bench/probes.h"
#include "properties/property.h"
#include "properties/rc/generators.h"
#include "properties/rc/hunt.h"
#include "properties/rc/hunt_worker.h"
#include "properties/rc/kill_matrix.h"
#include "properties/runner.h"

namespace {

using namespace kvcheck;

constexpr uint64_t kScenarioSeed = 0x68617273ull;  // "hars"
constexpr int kMaxSize = 100;                      // RapidCheck's default max size

int scenario_count() {
  const char* value = std::getenv("KVCHECK_HARNESS_SCENARIOS");
  const int n = value != nullptr ? std::atoi(value) : 200;
  return n > 0 ? n : 200;
}

// The fixed set for one emphasis, generated on first use.
const std::vector<Scenario>& scenarios(rcgen::Emphasis emphasis) {
  static std::vector<Scenario> sets[2];
  std::vector<Scenario>& set = sets[emphasis == rcgen::Emphasis::kAny ? 0 : 1];
  if (set.empty()) {
    const rc::Gen<Scenario> gen = rcgen::scenario(emphasis);
    rc::Random random(kScenarioSeed + static_cast<uint64_t>(emphasis));
    const int n = scenario_count();
    for (int i = 0; i < n; ++i) {
      set.push_back(gen(random.split(), i % (kMaxSize + 1)).value());
    }
  }
  return set;
}

void BM_Property(benchmark::State& state) {
  const Property property = static_cast<Property>(state.range(0));
  const std::vector<Scenario>& set = scenarios(rcgen::emphasis_for(property));
  const EngineFactory factory = cpu_engine_factory({}, KernelPath::kOptimized);
  int64_t cases = 0, applicable = 0, failed = 0;
  for (auto _ : state) {
    for (const Scenario& s : set) {
      const Verdict v = check_property(property, s, factory);
      benchmark::DoNotOptimize(v.passed);
      applicable += v.applicable;
      failed += !v.passed;
      ++cases;
    }
  }
  if (failed > 0) {
    state.SkipWithError("the correct engine failed a property: the harness is broken");
  }
  state.SetLabel(std::string(property_label(property)) + " " +
                 std::string(property_name(property)));
  state.counters["cases/s"] = benchmark::Counter(double(cases), benchmark::Counter::kIsRate);
  state.counters["applicable"] =
      benchmark::Counter(double(applicable) / double(cases > 0 ? cases : 1));
}
BENCHMARK(BM_Property)
    ->DenseRange(0, kPropertyCount - 1)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

// check_all (every property on one case, as the kill matrix's 'any' column
// and the campaigns run it) on the correct engine: cases/s of the whole suite.
void BM_CheckAny(benchmark::State& state) {
  const std::vector<Scenario>& set = scenarios(rcgen::Emphasis::kAny);
  const EngineFactory factory = cpu_engine_factory({}, KernelPath::kOptimized);
  int64_t cases = 0, failed = 0;
  for (auto _ : state) {
    for (const Scenario& s : set) {
      const Verdict v = check_all(s, factory);
      failed += !v.passed;
      ++cases;
    }
  }
  if (failed > 0) state.SkipWithError("the correct engine failed check_all");
  state.counters["cases/s"] = benchmark::Counter(double(cases), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CheckAny)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// P1 on the optimized CPU engine: 0 the direct factory (cpu_engine_factory),
// 1 through the registry (backend "cpu"), 2 the same engine behind the C
// plugin ABI (its code resolves from this binary, so only the shim differs).
EngineUnderTest oracle_path(int64_t path) {
  switch (path) {
    case 1:
      return backend_registry().resolve("cpu").under_test();
    case 2:
      return backend_registry().resolve(std::string("plugin:") + KVCHECK_CPU_PLUGIN).under_test();
    default:
      return EngineUnderTest(cpu_engine_factory({}, KernelPath::kOptimized), cpu_engine_traits());
  }
}

// One thread per path of a comparison, each run in turn, never two at once.
// The weights and oracle references of a model are cached per thread
// (properties/common/reference.cpp), so on one thread the path that goes first would
// compute them for the others; on its own thread each path computes what a
// campaign on it computes for every case.
class PathThreads {
 public:
  explicit PathThreads(size_t n) {
    for (size_t k = 0; k < n; ++k) threads_.emplace_back([this, k] { serve(k); });
  }
  ~PathThreads() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  // Runs work on path k's thread and returns when it is done.
  void run(size_t k, const std::function<void()>& work) {
    std::unique_lock lock(mutex_);
    work_ = &work;
    turn_ = k;
    wake_.notify_all();
    done_.wait(lock, [this] { return work_ == nullptr; });
  }

 private:
  void serve(size_t k) {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || (work_ != nullptr && turn_ == k); });
      if (stopping_) return;
      (*work_)();
      work_ = nullptr;
      done_.notify_all();
    }
  }
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void()>* work_ = nullptr;
  size_t turn_ = 0;
  bool stopping_ = false;
};

// The three paths take turns on every scenario, each timed by this thread's
// CPU clock, so load from other processes and drift during the run fall on
// all three alike. Counters: cases/s per path and the ratios to direct.
void BM_OracleByPath(benchmark::State& state) {
  const std::vector<Scenario>& set = scenarios(rcgen::Emphasis::kAny);
  const EngineUnderTest paths[3] = {oracle_path(0), oracle_path(1), oracle_path(2)};
  double seconds[3] = {0, 0, 0};
  int64_t cases = 0, failed = 0;
  PathThreads threads(3);
  for (auto _ : state) {
    for (const Scenario& s : set) {
      for (int k = 0; k < 3; ++k) {
        const int path = int((cases + k) % 3);  // rotate who goes first
        threads.run(size_t(path), [&] {
          const double begin = bench::thread_cpu_seconds();
          const Verdict v = check_property(Property::kOracle, s, paths[path]);
          seconds[path] += bench::thread_cpu_seconds() - begin;
          failed += !v.passed;
        });
      }
      ++cases;
    }
  }
  if (failed > 0) state.SkipWithError("the correct engine failed P1");
  static const char* const kPaths[] = {"direct", "registry", "plugin"};
  for (int path = 0; path < 3; ++path) {
    state.counters[std::string(kPaths[path]) + " cases/s"] = double(cases) / seconds[path];
  }
  state.counters["registry/direct"] = seconds[0] / seconds[1];
  state.counters["plugin/direct"] = seconds[0] / seconds[2];
}
BENCHMARK(BM_OracleByPath)->Unit(benchmark::kMillisecond)->MinTime(5.0)->Repetitions(3);

// Engine creation alone (create, one step of one token, destroy) through the
// direct factory and through the plugin, taking turns per scenario: P1 makes
// a new engine for nearly every case, so this is where a per-engine shim cost
// shows. Thread CPU; the ratio is plugin time over direct time per create.
void BM_CreateByPath(benchmark::State& state) {
  const std::vector<Scenario>& set = scenarios(rcgen::Emphasis::kAny);
  const EngineUnderTest paths[2] = {oracle_path(0), oracle_path(2)};
  const int repeats = int(state.range(0));  // engines per model in a row
  double seconds[2] = {0, 0};
  int64_t creates = 0;
  std::vector<float> logits;  // [1][vocab], reused
  for (auto _ : state) {
    for (const Scenario& s : set) {
      const std::shared_ptr<const Weights> weights = scenario_weights(s);
      for (int k = 0; k < 2; ++k) {
        const int path = int((creates + k) % 2);
        const double begin = bench::thread_cpu_seconds();
        for (int again = 0; again < repeats; ++again) {
          std::unique_ptr<Engine> engine =
              paths[path].factory(s.config, *weights, s.engine_options());
          const SequenceId id = engine->start();
          const int32_t token = 0;
          const BatchEntry entry{id, {&token, 1}};
          engine->step({&entry, 1}, logits);
        }
        seconds[path] += bench::thread_cpu_seconds() - begin;
      }
      ++creates;
    }
  }
  state.counters["direct us/create"] = 1e6 * seconds[0] / double(creates * repeats);
  state.counters["plugin us/create"] = 1e6 * seconds[1] / double(creates * repeats);
  state.counters["plugin/direct"] = seconds[0] / seconds[1];
}
BENCHMARK(BM_CreateByPath)
    ->Arg(1)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->Repetitions(3);

double wall_seconds() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// CPU seconds of this process's children (exec engines, started by whichever
// thread resolved their backend), from /proc in clock ticks: coarse per case,
// unbiased summed over many.
double children_cpu_seconds() {
  double ticks = 0;
  std::vector<long> pids;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream children(task.path() / "children");
    for (long pid; children >> pid;) pids.push_back(pid);
  }
  for (const long pid : pids) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 13 && fields >> field; ++i) {
    }
    double utime = 0, stime = 0;
    fields >> utime >> stime;  // fields 14 and 15
    ticks += utime + stime;
  }
  return ticks / double(sysconf(_SC_CLK_TCK));
}

// P1 on the in-process CPU engine against the same engine behind the engine
// protocol (exec:kvcheck-serve) and the PyTorch engine (adapters/torch),
// taking turns of 25 cases. Wall clock, not thread CPU: an exec engine
// computes in its child. KVCHECK_BENCH_TORCH overrides the torch command
// ("" skips it); the default uses /usr/bin/python3 (Debian's python3-torch).
// A fixed set drawn for a backend's traits, as a campaign on it draws (paged
// pools that may run dry, fork, truncate, windows, ... where it declares them).
std::vector<Scenario> scenarios_for(const EngineTraits& traits) {
  std::vector<Scenario> set;
  const rc::Gen<Scenario> gen = rcgen::scenario(rcgen::Emphasis::kAny, traits);
  rc::Random random(kScenarioSeed);
  for (int i = 0; i < scenario_count(); ++i)
    set.push_back(gen(random.split(), i % (kMaxSize + 1)).value());
  return set;
}

// In process: backend "cpu", as a campaign runs it. Arg 0: the set drawn for
// strict traits (no operation beyond start, step, finish and reset), on all
// three engines. Arg 1: the set drawn for kvcheck-serve's traits, which are
// the CPU engine's less its storage map, so what a campaign on either draws;
// the torch engine, which declares none of those operations, is left out.
void BM_OracleThroughExec(benchmark::State& state) {
  const EngineUnderTest served =
      backend_registry().resolve(std::string("exec:") + KVCHECK_SERVE).under_test();
  static const std::vector<Scenario> served_set = scenarios_for(served.traits);
  const std::vector<Scenario>& set =
      state.range(0) == 0 ? scenarios(rcgen::Emphasis::kAny) : served_set;
  std::vector<std::pair<std::string, EngineUnderTest>> paths = {{"in-process", oracle_path(1)},
                                                                {"exec:kvcheck-serve", served}};
  const char* torch_env = std::getenv("KVCHECK_BENCH_TORCH");
  const std::string torch =
      state.range(0) != 0 ? std::string()
      : torch_env != nullptr
          ? std::string(torch_env)
          : std::string("/usr/bin/python3 ") + KVCHECK_SOURCE_DIR + "/adapters/torch/engine.py";
  if (!torch.empty())
    paths.push_back({"torch", backend_registry().resolve("exec:" + torch).under_test()});
  std::vector<double> seconds(paths.size(), 0.0), cpu(paths.size(), 0.0);
  std::vector<int64_t> failed(paths.size(), 0), applicable(paths.size(), 0);
  int64_t cases = 0;
  PathThreads threads(paths.size());
  // One case each, untimed, first: the rate is the steady one, without
  // first-use costs (a backend's first slot folder, empty caches), which
  // are reported on their own. The child itself starts at resolve, untimed.
  for (size_t path = 0; path < paths.size(); ++path) {
    threads.run(path, [&] {
      const double begin = wall_seconds();
      check_property(Property::kOracle, set.front(), paths[path].second);
      state.counters[paths[path].first + " first case ms"] = 1e3 * (wall_seconds() - begin);
    });
  }
  // Turns of a campaign's default --turn-cases: its round robin gives a
  // backend that many cases back to back, and an exec child that spins
  // between requests (docs/ENGINE_PROTOCOL.md) sees them as a campaign does.
  constexpr size_t kTurnCases = 25;
  size_t turns = 0;
  for (auto _ : state) {
    for (size_t first = 0; first < set.size(); first += kTurnCases, ++turns) {
      const size_t end = std::min(set.size(), first + kTurnCases);
      for (size_t k = 0; k < paths.size(); ++k) {
        const size_t path = (turns + k) % paths.size();  // rotate who goes first
        threads.run(path, [&] {
          const double child_begin = children_cpu_seconds();
          const double cpu_begin = bench::thread_cpu_seconds();
          const double begin = wall_seconds();
          for (size_t i = first; i < end; ++i) {
            const Verdict v = check_property(Property::kOracle, set[i], paths[path].second);
            failed[path] += !v.passed;
            applicable[path] += v.applicable;
          }
          seconds[path] += wall_seconds() - begin;
          cpu[path] += bench::thread_cpu_seconds() - cpu_begin;
          cpu[path] += children_cpu_seconds() - child_begin;
        });
      }
      cases += int64_t(end - first);
    }
  }
  for (size_t path = 0; path < paths.size(); ++path) {
    if (failed[path] > 0) state.SkipWithError((paths[path].first + " failed P1").c_str());
    state.counters[paths[path].first + " cases/s"] = double(cases) / seconds[path];
    state.counters[paths[path].first + " applicable"] = double(applicable[path]);
    if (path > 0) state.counters[paths[path].first + "/in-process"] = seconds[0] / seconds[path];
    // CPU (this thread plus the child): what wall time would be with a core
    // each and no wait for the scheduler, which a loaded machine adds to
    // every round trip.
    if (path > 0) state.counters[paths[path].first + "/in-process CPU"] = cpu[0] / cpu[path];
  }
}
BENCHMARK(BM_OracleThroughExec)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->Repetitions(3);

// P1 on the backend named by KVCHECK_BENCH_BACKEND (any backend string, e.g.
// exec:'node adapters/llama.cpp/engine.mjs'), skipped when it is unset:
// cases/s by the wall clock, since an exec: engine works in another process.
// Its own fixed set, drawn for the backend's traits (a llama-only engine gets
// llama scenarios), of KVCHECK_HARNESS_SCENARIOS cases.
void BM_OracleOnBackend(benchmark::State& state) {
  const char* spec = std::getenv("KVCHECK_BENCH_BACKEND");
  if (spec == nullptr || *spec == 0) {
    state.SkipWithError("KVCHECK_BENCH_BACKEND is not set");
    for (auto _ : state) {
    }
    return;
  }
  const EngineUnderTest subject = backend_registry().resolve(spec).under_test();
  static std::vector<Scenario> set;
  if (set.empty()) {
    const rc::Gen<Scenario> gen = rcgen::scenario(rcgen::Emphasis::kAny, subject.traits);
    rc::Random random(kScenarioSeed);
    for (int i = 0; i < scenario_count(); ++i) {
      set.push_back(gen(random.split(), i % (kMaxSize + 1)).value());
    }
  }
  int64_t cases = 0, applicable = 0, failed = 0;
  for (auto _ : state) {
    for (const Scenario& s : set) {
      const Verdict v = check_property(Property::kOracle, s, subject);
      applicable += v.applicable;
      failed += !v.passed;
      ++cases;
    }
  }
  if (failed > 0) state.SkipWithError("P1 failed on the backend");
  state.SetLabel(spec);
  state.counters["cases/s"] = benchmark::Counter(double(cases), benchmark::Counter::kIsRate);
  state.counters["applicable"] =
      benchmark::Counter(double(applicable) / double(cases > 0 ? cases : 1));
}
BENCHMARK(BM_OracleOnBackend)->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();

// A campaign's turns (P1, 25 cases each, a seed per turn) in this process and
// through a hunt worker (properties/rc/hunt_worker.h), taking turns, wall
// time each: what running every case in a forked worker costs, so that an
// engine's crash is a verdict. Each evaluation is described to the caller
// as a campaign describes it (its coverage classes).
void BM_HuntWorker(benchmark::State& state) {
  const auto subject =
      std::make_shared<const EngineUnderTest>(cpu_engine_factory(), cpu_engine_traits());
  const auto spec_for = [&](const std::string& job) {
    rcgen::HuntSpec spec;
    spec.subject = subject;
    spec.property = Property::kOracle;
    spec.options.traits = subject->traits;
    spec.options.seed = std::stoull(job);
    spec.options.max_cases = 25;
    spec.describe = [](const Scenario& s, const Verdict& v) {
      const rcgen::Coverage c = rcgen::coverage(s);
      return std::to_string(v.passed) + std::to_string(v.worst_ratio) + std::to_string(c.gpt2);
    };
    return spec;
  };
  rcgen::HuntWorker paths[2] = {{spec_for, rcgen::in_process()}, {spec_for, {}}};
  double seconds[2] = {0, 0};
  int64_t cases = 0;
  uint64_t turn = 0;
  for (auto _ : state) {
    for (int t = 0; t < 40; ++t, ++turn) {
      for (int k = 0; k < 2; ++k) {
        const int path = int((turn + uint64_t(k)) % 2);  // rotate who goes first
        const auto begin = std::chrono::steady_clock::now();
        const rcgen::HuntResult r = paths[path].run(std::to_string(turn), {});
        seconds[path] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        if (r.failed) state.SkipWithError("the correct engine failed P1");
      }
      cases += 25;
    }
  }
  state.counters["in-process cases/s"] = double(cases) / seconds[0];
  state.counters["worker cases/s"] = double(cases) / seconds[1];
  state.counters["worker/in-process"] = seconds[0] / seconds[1];
}
BENCHMARK(BM_HuntWorker)->Unit(benchmark::kMillisecond)->MinTime(5.0)->Repetitions(3);

// The kill matrix's 'any' column with its CI options (seed, 100 cases per
// fault, shrinking on): the time to kill every fault of the catalogue. The
// correct-engine row is cut to 10 cases here (it is not part of the figure).
void BM_KillAllFaults(benchmark::State& state) {
  rcgen::KillMatrixOptions options;
  options.per_property = false;
  options.correct_cases = 10;
  for (auto _ : state) {
    const rcgen::KillMatrix matrix =
        rcgen::run_kill_matrix([](FaultSet f) { return cpu_engine_factory(f); }, options);
    state.SetIterationTime(matrix.kill_all_seconds);
    if (!matrix.problems().empty()) {
      state.SkipWithError(("kill matrix problem: " + matrix.problems().front()).c_str());
      break;
    }
  }
}
BENCHMARK(BM_KillAllFaults)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
