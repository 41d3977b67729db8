#include "tools/failure_report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "model/status.h"
#include "properties/rc/hunt_worker.h"
#include "properties/repro/failure_file.h"
#include "tools/backends.h"
#include "tools/counted.h"
#include "tools/fresh_child.h"
#include "tools/leak_search.h"

namespace kvcheck::cli {

namespace {

// The case to write after a failure on an exec: backend, confirmed in fresh
// processes; nullopt when it would not reproduce (said why).
std::optional<Confirmation> confirmed(const rcgen::HuntResult& result, Property property,
                                      const Backend& on, FaultSet faults,
                                      const CaseHistory* history) {
  const EngineUnderTest subject = history ? history->subject() : on.under_test(faults);
  if (!serves_many_cases(subject)) {
    Confirmation as_found;
    as_found.outcome = Confirmation::Outcome::kFailsAlone;
    as_found.verdict = result.verdict;
    return as_found;
  }
  Confirmation c = confirm_in_fresh_process(subject, property, *result.counterexample, history);
  std::printf("%s", confirmation_report(c).c_str());
  using Outcome = Confirmation::Outcome;
  if (c.outcome != Outcome::kFailsAlone && c.outcome != Outcome::kLeak) return std::nullopt;
  return c;
}

}  // namespace

std::string report_failure(const rcgen::HuntResult& result, Property property, const Backend& on,
                           FaultSet faults, uint64_t seed, const std::string& failures_dir,
                           const CaseHistory* history, const std::string& reference) {
  const std::string& backend = on.spec;
  std::printf("\nFAILED %s %s on %s (faults: %s) after %s, hunt seed %llu\n",
              std::string(property_label(property)).c_str(),
              std::string(property_name(property)).c_str(), backend.c_str(),
              faults.to_string().c_str(), counted(result.cases_run, "case").c_str(),
              (unsigned long long)seed);
  if (result.counterexample) {
    std::printf("minimized scenario (size %d):\n%s\n", result.counterexample->size(),
                result.counterexample->to_text().c_str());
  }
  std::printf("%s\n%s\n", result.verdict.summary.c_str(), result.verdict.detail.c_str());
  if (!result.counterexample) {
    std::fflush(stdout);
    return "";
  }
  const std::optional<Confirmation> c = confirmed(result, property, on, faults, history);
  if (!c) {
    std::fflush(stdout);
    return "";
  }
  FailureContext context;
  context.failures_dir = failures_dir;
  context.backend = backend;
  if (property == Property::kCrossEngine) context.reference = reference;
  context.engine = on.traits.identity.name + " " + on.traits.identity.version;
  context.found_by = "kvcheck campaign (" + std::string(property_label(property)) + " on " +
                     backend + ", hunt seed " + std::to_string(seed) + ")";
  // The hunt's own RapidCheck seed re-runs exactly this batch of cases.
  context.reproduce = "RapidCheck seed " + std::to_string(seed) + " of rcgen::hunt(" +
                      std::string(property_name(property)) + ")";
  context.prelude = c->prelude;
  if (!c->prelude.empty()) {
    context.notes.push_back(
        "state leak between cases: passes alone in a fresh engine process, fails there after "
        "the prelude (" +
        std::to_string(c->prelude.size()) + " of the " + std::to_string(c->earlier) +
        " cases the campaign's process checked before it)");
  }
  const WrittenCase written =
      write_failure_case(*result.counterexample, c->verdict, faults, context);
  std::printf("%s", written.report.c_str());
  std::fflush(stdout);
  return written.ok ? written.path : "";
}

std::vector<std::string> collect_files(const std::vector<std::string>& paths,
                                       const std::string& extension) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file(ec) && it->path().extension() == extension) {
          found.push_back(it->path().string());
        }
      }
      if (ec) throw InputError(path + ": cannot list the folder: " + ec.message());
      if (found.empty()) throw InputError(path + ": the folder holds no *" + extension + " files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(path, ec)) {
      files.push_back(path);
    } else {
      throw InputError(path + ": no such file or folder");
    }
  }
  return files;
}

FaultSet parse_fault_option(const std::string& text) {
  const Result<FaultSet> faults = parse_fault_list(text);
  if (!faults.ok()) throw InputError("--fault: " + faults.error());
  return faults.value();
}

CaseEngine case_engine(const CaseFile& c, const std::string& backend_override,
                       const std::optional<FaultSet>& fault_override,
                       const std::string& reference) {
  const std::string name = backend_for_case(c.backend, backend_override, "cpu");
  const FaultSet faults = fault_override ? *fault_override : c.faults;
  Backend backend = backend_registry().resolve(name);
  std::string reference_name = reference;
  if (reference_name.empty() && !c.reference.empty()) {
    if (backend_runs_named_code(c.reference)) {
      throw InputError("the case's P10 reference is " + c.reference +
                       "; kvcheck never loads a plugin or starts a command named by a case "
                       "file. To run it, pass it yourself: --reference " +
                       shell_quote(c.reference));
    }
    reference_name = c.reference;
  }
  EngineUnderTest subject = engine_under_test(backend, faults, reference_engine(reference_name));
  return {std::move(backend), faults, std::move(subject)};
}

Verdict check_case(const CaseEngine& engine, Property property, const Scenario& scenario) {
  if (engine.in_process || !engine.backend.forkable) {
    return check_property(property, scenario, engine.subject);
  }
  rcgen::HuntSpec spec;
  spec.subject = std::make_shared<const EngineUnderTest>(engine.subject);
  spec.property = property;
  return rcgen::check_in_fresh_process(spec, scenario, rcgen::WorkerOptions{});
}

}  // namespace kvcheck::cli
