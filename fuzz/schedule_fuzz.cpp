// schedule_fuzz: raw bytes -> a bounded Scenario (schedule_program.h) -> every
// property on the engine of KVCHECK_BACKEND (a backend string, default cpu).
// A failing verdict prints the scenario and the verdict, writes a case file
// and aborts, so libFuzzer keeps the input as a crash. KVCHECK_FAULT=name[,...]
// turns engine faults on, so a campaign can prove it finds each one. A
// scenario the engine's traits exclude is not applicable, never a failure.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "backends/registry.h"
#include "engine/faults.h"
#include "fuzz/fuzz_target.h"
#include "fuzz/schedule_program.h"
#include "properties/property.h"
#include "properties/repro/failure_file.h"
#include "properties/runner.h"
#include "properties/scenario.h"

namespace kvcheck::fuzz {

const TargetTraits kTarget{"schedule_fuzz", /*keep_rejected_in_corpus=*/false};

namespace {

FaultSet g_faults;
std::string g_backend = "cpu";
std::unique_ptr<EngineUnderTest> g_subject;

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "schedule_fuzz: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

[[noreturn]] void report_failure(const Scenario& scenario, const Verdict& verdict) {
  std::string text = "property " + std::string(property_label(verdict.property)) + " " +
                     std::string(property_name(verdict.property)) +
                     " failed (faults: " + g_faults.to_string() + ")\n" + verdict.summary + "\n" +
                     verdict.detail + "\nscenario:\n" + scenario.to_text();
  FailureContext context;  // failures_dir: $KVCHECK_FAILURES, else ./kvcheck-failures
  context.backend = g_backend;
  context.engine = g_subject->traits.identity.name + " " + g_subject->traits.identity.version;
  context.found_by = "schedule_fuzz";
  const WrittenCase written = write_failure_case(scenario, verdict, g_faults, context);
  text += written.report;
  fail(text);
}

}  // namespace

void initialize() {
  const char* env = std::getenv("KVCHECK_FAULT");
  const Result<FaultSet> faults = parse_fault_list(env ? env : "none");
  if (!faults.ok()) fail("KVCHECK_FAULT: " + faults.error());
  g_faults = faults.value();
  if (g_faults.any())
    std::fprintf(stderr, "schedule_fuzz: faults on: %s\n", g_faults.to_string().c_str());
  if (const char* backend = std::getenv("KVCHECK_BACKEND")) g_backend = backend;
  try {
    const Backend backend = backend_registry().resolve(g_backend);
    if (g_faults.any() && !backend.traits.operations.fault_switches) {
      fail("KVCHECK_FAULT: backend " + g_backend + " has no fault switches");
    }
    g_subject = std::make_unique<EngineUnderTest>(backend.under_test(g_faults));
  } catch (const InputError& e) {
    fail(std::string("KVCHECK_BACKEND: ") + e.what());
  }
}

Outcome run_one(std::span<const uint8_t> input) {
  const ScheduleProgram program = decode(input);
  const std::vector<uint8_t> canonical = encode(program);
  // The custom mutator relies on encode() inverting decode().
  if (decode(canonical) != program) fail("encode() does not invert decode() on this input");
  const Scenario scenario = to_scenario(program);
  if (const std::string error = scenario.validate(); !error.empty()) {
    fail("the decoded scenario does not validate: " + error + "\n" + scenario.to_text());
  }
  if (const Verdict verdict = check_all(scenario, *g_subject); !verdict.passed) {
    report_failure(scenario, verdict);
  }
  const bool is_canonical = canonical.size() == input.size() &&
                            std::equal(canonical.begin(), canonical.end(), input.begin());
  return is_canonical ? Outcome::kAccepted : Outcome::kRejected;
}

}  // namespace kvcheck::fuzz
