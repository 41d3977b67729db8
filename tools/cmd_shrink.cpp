// `kvcheck shrink FILE`: minimizes a failing case file, whatever produced it,
// with the deterministic shrinker of properties/repro/shrink.h, keeping the
// same property and the same faults. Writes FILE's stem + ".shrunk.case" next
// to it (never overwriting) and prints the sizes before and after. Exit 0
// when the result is written, 2 on bad input (including a case that does not
// fail, which has nothing to shrink).
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "model/status.h"
#include "properties/repro/case_file.h"
#include "properties/repro/failure_file.h"
#include "properties/repro/shrink.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/failure_report.h"
#include "tools/fresh_child.h"
#include "tools/model_option.h"
#include "tools/run_report.h"

namespace kvcheck::cli {

namespace {

struct ShrinkCommandOptions {
  std::string path;
  std::string backend;
  std::string fault;
  int max_evaluations = 20000;
  double seconds = 600;
  std::string json_path;
  std::string reference;  // P10's reference backend
  std::string model;      // --model DIR, for case files of --model runs
  bool in_process = false;
};

// Shrinks the case as its file records it: a case with a prelude runs every
// candidate after the prelude, each in an engine process of its own
// (tools/fresh_child.h), since a leak needs exactly those cases before it.
std::optional<ShrinkResult> shrink_case(const CaseFile& input, const CaseEngine& engine,
                                        const ShrinkOptions& options) {
  // Without a prelude, an in-process engine's candidates each run in a
  // process of their own (check_case), so that a crash shrinks like any
  // failure.
  const FailureCheck check = [&](const Scenario& s) -> std::optional<Verdict> {
    Verdict v = input.prelude.empty()
                    ? check_case(engine, input.property, s)
                    : check_after_prelude(engine.subject, input.prelude, input.property, s).verdict;
    if (v.passed) return std::nullopt;
    return v;
  };
  const std::optional<Verdict> initial = check(input.scenario);
  if (!initial) return std::nullopt;
  return shrink_scenario(input.scenario, *initial, check, options);
}

// The verdict to record. An exec: engine served every candidate in one
// process: the result is written only if it fails as replay will run it, in
// a fresh process (a leak between candidates could have made it fail), and
// with that run's verdict.
Verdict confirmed_verdict(const CaseFile& input, const CaseEngine& engine,
                          const ShrinkResult& result) {
  if (!input.prelude.empty() || !serves_many_cases(engine.subject)) return result.verdict;
  const Verdict fresh =
      check_after_prelude(engine.subject, {}, input.property, result.scenario).verdict;
  if (fresh.passed) {
    throw InputError(
        "the shrunk case (size " + std::to_string(result.size_after) +
        ") failed after the candidates before it but passes in a fresh engine process (" +
        fresh.summary +
        "): a state leak between cases, so nothing was written; kvcheck campaign finds the "
        "cases such a failure needs (a prelude, docs/CASE_FORMAT.md)");
  }
  return fresh;
}

// The input case with the shrunk scenario, the engine it failed on and its
// verdict, noting where it came from.
CaseFile shrunk_case(const CaseFile& input, const CaseEngine& engine, const ShrinkResult& result,
                     const Verdict& verdict, const std::string& input_path) {
  CaseFile output = input;
  output.scenario = result.scenario;
  output.faults = engine.faults;
  output.backend = engine.backend.spec;
  output.engine =
      engine.backend.traits.identity.name + " " + engine.backend.traits.identity.version;
  output.has_verdict = true;
  output.verdict = record_verdict(verdict);
  output.notes.push_back(one_line("shrunk by kvcheck shrink from " +
                                  std::filesystem::path(input_path).filename().string() +
                                  " (size " + std::to_string(result.size_before) + " -> " +
                                  std::to_string(result.size_after) + ")"));
  return output;
}

// kvcheck shrink --json: what was shrunk, how far, and by which limit.
void write_shrink_json(const ShrinkCommandOptions& o, const std::string& written, Property property,
                       const CaseEngine& engine, const ShrinkResult& result, double seconds,
                       const Verdict& verdict) {
  write_text_file("--json", o.json_path,
                  nlohmann::json{{"input", o.path},
                                 {"output", written},
                                 {"property", property_name(property)},
                                 {"faults", engine.faults.to_string()},
                                 {"size_before", result.size_before},
                                 {"size_after", result.size_after},
                                 {"evaluations", result.evaluations},
                                 {"accepted", result.accepted},
                                 {"fixed_point", result.fixed_point},
                                 {"stopped_by_time", result.stopped_by_time},
                                 {"seconds", seconds},
                                 {"summary", verdict.summary}}
                          .dump(2) +
                      "\n");
}

int run_shrink(const ShrinkCommandOptions& o) {
  const Result<CaseFile> parsed = read_case_file(o.path);
  if (!parsed) throw InputError(parsed.error());
  CaseFile input = parsed.value();
  input.scenario.model = case_model(input, o.model);
  const std::optional<FaultSet> fault_override =
      o.fault.empty() ? std::nullopt : std::optional<FaultSet>(parse_fault_option(o.fault));
  CaseEngine engine = case_engine(input, o.backend, fault_override, o.reference);
  engine.in_process = o.in_process;
  const Property property = input.property;
  const std::string label =
      std::string(property_label(property)) + " " + std::string(property_name(property));
  std::printf("kvcheck shrink %s: %s on %s with faults %s, size %d\n", o.path.c_str(),
              label.c_str(), engine.backend.spec.c_str(), engine.faults.to_string().c_str(),
              input.scenario.size());
  std::fflush(stdout);

  const auto start = std::chrono::steady_clock::now();
  const bool tty = isatty(STDERR_FILENO);
  ShrinkOptions options;
  options.max_evaluations = o.max_evaluations;
  options.max_seconds = o.seconds;
  options.on_accept = [&](const Scenario& s, int evaluations) {
    if (!tty) return;
    std::fprintf(stderr, "\r\033[Ksize %d after %d checks", s.size(), evaluations);
  };
  const std::optional<ShrinkResult> result = shrink_case(input, engine, options);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!result) {
    throw InputError(o.path + ": " + label + " holds on " + engine.backend.spec + " with faults " +
                     engine.faults.to_string() +
                     ", so there is nothing to shrink (shrink needs a failing case; see "
                     "`kvcheck replay`)");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Verdict verdict = confirmed_verdict(input, engine, *result);

  const CaseFile output = shrunk_case(input, engine, *result, verdict, o.path);
  const std::filesystem::path input_path(o.path);
  std::string stem = input_path.filename().string();
  if (input_path.extension() == ".case") stem = input_path.stem().string();
  const Result<std::string> written = write_new_file(input_path.parent_path().string(),
                                                     stem + ".shrunk", ".case", print_case(output));
  if (!written) throw InputError(written.error());

  std::printf("size %d -> %d (%d checks, %d accepted, %.1f s%s)\n", result->size_before,
              result->size_after, result->evaluations, result->accepted, seconds,
              result->fixed_point       ? ", fixed point"
              : result->stopped_by_time ? ", stopped by --time: a faster machine may go further"
                                        : ", stopped by --max-evaluations");
  std::printf("%s\n", verdict.summary.c_str());
  std::printf("wrote %s\nreplay: kvcheck replay%s %s\n", written.value().c_str(),
              case_command_options(output).c_str(), written.value().c_str());
  if (!o.json_path.empty()) {
    write_shrink_json(o, written.value(), property, engine, *result, seconds, verdict);
  }
  return 0;
}

}  // namespace

Action add_shrink(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "shrink", "Minimize a failing case file; writes FILE.shrunk.case next to it");
  auto o = std::make_shared<ShrinkCommandOptions>();
  cmd->add_option("file", o->path, "the failing case file")->required();
  cmd->add_option("--backend", o->backend,
                  "backend string (default: the case's in-tree backend, else cpu; a plugin or "
                  "command named by a case runs only when given here)");
  cmd->add_option("--reference", o->reference, "P10's reference backend (e.g. cpu)");
  cmd->add_option("--fault", o->fault,
                  "fault switches instead of the case's: none, or names separated by commas");
  cmd->add_option("--max-evaluations", o->max_evaluations, "stop after this many checks")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  cmd->add_option("--time", o->seconds, "stop after this many seconds")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--model", o->model,
                  "the checkpoint folder a --model case ran on; its files must still hash to "
                  "the case's model_hash");
  cmd->add_option("--json", o->json_path, "also write the sizes and verdict as JSON to FILE")
      ->check(report_file());
  cmd->add_flag("--in-process", o->in_process,
                "check in kvcheck's own process, not in a forked one per candidate: a crash "
                "then ends kvcheck (for a debugger)");
  return [cmd, o]() { return cmd->parsed() ? run_shrink(*o) : -1; };
}

}  // namespace kvcheck::cli
