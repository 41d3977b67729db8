#include "conformance/suite.h"

#include <gtest/gtest.h>

#include <rapidcheck.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>

#include "backends/in_tree.h"
#include "backends/plugin.h"
#include "conformance/rc_driver.h"
#include "model/status.h"
#include "properties/property.h"
#include "properties/rc/hunt.h"
#include "properties/repro/case_file.h"
#include "properties/repro/failure_file.h"
#include "properties/repro/shrink.h"

namespace kvcheck::conformance {

namespace {

std::string g_program = "conformance";  // argv[0], for the replay commands printed
std::string g_failures_dir;             // --failures; empty: the default

// KVCHECK_FAULT=name[,name] runs the suite against a faulty in-tree engine,
// to watch a property catch a fault and write its case file.
FaultSet faults_from_environment() {
  const char* names = std::getenv("KVCHECK_FAULT");
  if (names == nullptr) return FaultSet();
  const Result<FaultSet> faults = parse_fault_list(names);
  if (!faults.ok()) throw InputError("KVCHECK_FAULT: " + faults.error());
  return faults.value();
}

EngineUnderTest subject_for(const std::string& spec, const std::string& reference,
                            FaultSet faults) {
  const Backend backend = suite_registry().resolve(spec);
  if (faults.any() && !backend.traits.operations.fault_switches) {
    throw InputError("KVCHECK_FAULT: backend " + spec + " has no fault switches");
  }
  EngineUnderTest subject = backend.under_test(faults);
  if (!reference.empty()) {
    subject.reference =
        std::make_shared<const EngineUnderTest>(suite_registry().resolve(reference).under_test());
  }
  return subject;
}

void write_case(const Scenario& scenario, const Verdict& verdict, FaultSet faults,
                const EngineUnderTest& subject) {
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  FailureContext context;
  context.failures_dir = g_failures_dir;
  context.backend = subject.backend;
  context.engine = subject.traits.identity.name + " " + subject.traits.identity.version;
  context.found_by =
      std::string("conformance test ") + info->test_suite_name() + "." + info->name();
  const WrittenCase written = write_failure_case(scenario, verdict, faults, context);
  std::cout << written.report;
  if (written.ok) std::cout << "replay here: " << g_program << " --replay " << written.path << "\n";
  std::cout << std::flush;
}

class PropertyTest : public testing::Test {
 public:
  PropertyTest(SuiteBackend backend, Property property)
      : backend_(std::move(backend)), property_(property) {}

  void TestBody() override {
    if (!backend_.skip_reason.empty()) GTEST_SKIP() << backend_.skip_reason;
    const FaultSet faults = faults_from_environment();
    if (faults.any()) std::cout << "engine faults ON: " << faults.to_string() << std::endl;
    const EngineUnderTest subject = subject_for(backend_.spec, backend_.reference, faults);
    // RapidCheck evaluates the shrunk counterexample last, so the last
    // failing case seen is the one to keep as a file.
    std::optional<std::pair<Scenario, Verdict>> last_failure;
    int applicable = 0;
    test::check_scenarios(
        backend_.cases, rcgen::emphasis_for(property_),
        [&](const Scenario& s) {
          // An invalid scenario is "not applicable": a generator that made
          // one would silently test nothing.
          RC_ASSERT(s.validate() == "");
          test::classify(s);
          const Verdict v = check_property(property_, s, subject);
          RC_CLASSIFY(!v.applicable, "not applicable");
          applicable += v.applicable;
          if (!v.passed) {
            last_failure.emplace(s, v);
            RC_FAIL(v.summary + "\n" + v.detail);
          }
        },
        subject.traits);
    std::cout << applicable << " applicable cases" << std::endl;
    if (last_failure && testing::Test::HasFailure()) {
      write_case(last_failure->first, last_failure->second, faults, subject);
    }
  }

 private:
  SuiteBackend backend_;
  Property property_;
};

// "cpu?invariance=bounded" -> "cpu_invariance_bounded": a GoogleTest name.
std::string test_suite_name(const std::string& spec) {
  std::string out;
  for (char ch : spec) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

void register_tests(const std::vector<SuiteBackend>& backends) {
  for (const SuiteBackend& backend : backends) {
    for (int p = 0; p < kPropertyCount; ++p) {
      const Property property = static_cast<Property>(p);
      const std::string name =
          std::string(property_label(property)) + "_" + std::string(property_name(property));
      testing::RegisterTest(
          test_suite_name(backend.spec).c_str(), name.c_str(), nullptr, backend.spec.c_str(),
          __FILE__, __LINE__,
          [backend, property]() -> testing::Test* { return new PropertyTest(backend, property); });
    }
  }
}

struct Arguments {
  std::optional<std::string> replay, shrink;
  std::vector<std::string> backends;
  std::optional<int> cases;
  std::optional<std::string> reference;
};

// This suite's options (CLI11), the rest left in argv for GoogleTest. With
// --help they are printed before GoogleTest prints its own.
Arguments take_arguments(int& argc, char** argv) {
  Arguments a;
  CLI::App app{
      "kvcheck conformance suite: every property on the engine under test, as "
      "GoogleTest tests <backend>.<Pn_property>; a case file for every failure"};
  app.name(g_program);
  app.set_help_flag();  // --help reaches GoogleTest too
  app.allow_extras();
  app.add_option("--replay", a.replay, "replay a case file on its backend (exit 1 if it fails)");
  app.add_option("--shrink", a.shrink, "shrink a failing case file; writes shrunk-*.case");
  app.add_option("--backend", a.backends,
                 "backend string to check, repeatable (replaces the default; e.g. "
                 "'own-engine?bug=x', plugin:PATH.so, exec:'CMD ARGS')");
  app.add_option("--cases", a.cases,
                 "generated cases per property (RC_PARAMS max_success overrides)")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--reference", a.reference, "P10's reference backend (default: cpu)");
  app.add_option("--failures", g_failures_dir,
                 "folder for the case files of failures (default: kvcheck-failures)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    throw InputError(e.what());
  }
  const std::vector<std::string> rest = app.remaining();
  for (const std::string& arg : rest) {
    if (arg == "--help" || arg == "-h" || arg == "--gtest_help") std::cout << app.help() << "\n";
  }
  // GoogleTest's arguments in their order, after the program's name; argv's
  // strings outlive the run, so they are pointed to, not copied.
  int kept = 1;
  for (const std::string& arg : rest) {
    for (int i = kept; i < argc; ++i) {
      if (arg == argv[i]) {
        std::swap(argv[kept], argv[i]);
        ++kept;
        break;
      }
    }
  }
  argc = kept;
  return a;
}

// Replays (or shrinks) one case file on the backend it records. Exit 1 when
// the property fails, 0 when it holds.
int replay_or_shrink(const std::string& path, bool shrink, const Arguments& a,
                     const std::vector<SuiteBackend>& defaults) {
  const Result<CaseFile> parsed = read_case_file(path);
  if (!parsed) throw InputError(parsed.error());
  const CaseFile& c = parsed.value();
  const std::string spec = backend_for_case(
      c.backend, a.backends.empty() ? std::string() : a.backends.front(), defaults.front().spec);
  const std::string reference = a.reference ? *a.reference : defaults.front().reference;
  const EngineUnderTest subject = subject_for(spec, reference, c.faults);
  std::printf("%s %s on %s (faults %s)\n", std::string(property_label(c.property)).c_str(),
              std::string(property_name(c.property)).c_str(), spec.c_str(),
              c.faults.to_string().c_str());
  if (!shrink) {
    const Verdict v = check_property(c.property, c.scenario, subject);
    std::printf("%s\n%s", v.summary.c_str(), v.detail.c_str());
    return v.passed ? 0 : 1;
  }
  const std::optional<ShrinkResult> r = shrink_failure(c.scenario, c.property, subject);
  if (!r) throw InputError(path + ": the property holds, so there is nothing to shrink");
  CaseFile out = c;
  out.backend = spec;
  out.scenario = r->scenario;
  out.verdict = record_verdict(r->verdict);
  out.has_verdict = true;
  const Result<std::string> written = write_new_file(".", "shrunk", ".case", print_case(out));
  if (!written) throw InputError(written.error());
  std::printf("size %d -> %d: %s\nwrote %s\n", r->size_before, r->size_after,
              r->verdict.summary.c_str(), written.value().c_str());
  return 1;
}

}  // namespace

BackendRegistry& suite_registry() {
  static BackendRegistry registry = [] {
    BackendRegistry r;
    register_in_tree_backends(r);
    register_plugin_loader(r);
    return r;
  }();
  return registry;
}

void add_engine(const std::string& name, const std::string& description,
                BackendRegistry::Maker maker) {
  suite_registry().add(name, description, std::move(maker));
}

int run(int argc, char** argv, std::vector<SuiteBackend> backends) {
  g_program = argv[0];
  try {
    const Arguments a = take_arguments(argc, argv);
    if (!a.backends.empty()) {
      std::vector<SuiteBackend> chosen;
      for (const std::string& spec : a.backends) {
        SuiteBackend b = backends.empty() ? SuiteBackend{} : backends.front();
        b.spec = spec;
        b.skip_reason.clear();
        chosen.push_back(b);
      }
      backends = chosen;
    }
    for (SuiteBackend& b : backends) {
      if (a.cases) b.cases = *a.cases;
      if (a.reference) b.reference = *a.reference;
      // A bad backend string fails before any test (a skipped one is not run).
      if (b.skip_reason.empty()) suite_registry().resolve(b.spec);
    }
    if (a.replay) return replay_or_shrink(*a.replay, false, a, backends);
    if (a.shrink) return replay_or_shrink(*a.shrink, true, a, backends);
    testing::InitGoogleTest(&argc, argv);
    register_tests(backends);
    return RUN_ALL_TESTS();
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s: %s\n", g_program.c_str(), e.what());
    return 2;
  }
}

}  // namespace kvcheck::conformance
