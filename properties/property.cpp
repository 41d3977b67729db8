// The public face of the properties (property.h): names, applicability,
// check_property and check_all. Everything here reads the property table
// (property_table.h); no property is named in this file.
#include "properties/property.h"

#include <memory>
#include <utility>

#include "model/status.h"
#include "properties/common/context.h"
#include "properties/common/logits.h"
#include "properties/common/verdicts.h"
#include "properties/property_table.h"
#include "properties/runner.h"

namespace kvcheck {

using checks::Context;
using checks::engine_refused;
using checks::fail;
using checks::find_property_row;
using checks::not_applicable;
using checks::PoolRanDry;
using checks::PropertyRow;
using checks::start_verdict;

std::string_view property_name(Property p) {
  const PropertyRow* row = find_property_row(p);
  return row != nullptr ? row->name : std::string_view("unknown");
}

std::string_view property_label(Property p) {
  const PropertyRow* row = find_property_row(p);
  return row != nullptr ? row->label : std::string_view("P?");
}

std::optional<Property> parse_property(std::string_view name) {
  for (const PropertyRow& row : checks::property_rows()) {
    if (row.name == name || row.label == name) return row.property;
  }
  return std::nullopt;
}

namespace {

// The property's own check, once the scenario applies to the engine.
Verdict run_property(Property property, const Scenario& scenario, const EngineUnderTest& subject,
                     std::optional<RunResult> probe_run, bool first_run_probes) {
  try {
    const std::shared_ptr<const Weights> weights = scenario_weights(scenario);
    const Context context{scenario,
                          subject,
                          subject.factory,
                          *weights,
                          plan_schedule(scenario),
                          scenario_digest(scenario),
                          scenario.config.vocab,
                          std::move(probe_run),
                          first_run_probes};
    if (const PropertyRow* row = find_property_row(property)) return row->check(context);
  } catch (const EngineInconsistency& e) {
    // Answers that contradict each other, outside P6's own check (which
    // places them): the engine's failure.
    Verdict verdict = start_verdict(property);
    fail(verdict, Location{}, std::string("the engine contradicts itself: ") + e.what(),
         std::string("EngineInconsistency: ") + e.what() + "\n");
    return verdict;
  } catch (const EngineError& e) {
    // Only a call outside the scenario (a cache snapshot, a length) can
    // throw through; the engine must answer those for a running sequence.
    Verdict verdict = start_verdict(property);
    checks::fail_engine_error(verdict, Location{},
                              "the engine refused a query about a running sequence", false,
                              "EngineError: ", e.what());
    return verdict;
  } catch (const InputError& e) {
    // The scenario validated and the traits accept it, so an engine that
    // will not even be built for it fails the property.
    Verdict verdict = start_verdict(property);
    fail(verdict, Location{}, "the engine could not be built for a valid scenario",
         std::string("InputError: ") + e.what() + "\n");
    return verdict;
  } catch (const std::exception& e) {
    // Foreign engines throw whatever they throw; on a valid call that is a
    // failure of the engine, with a case file like any other.
    Verdict verdict = start_verdict(property);
    checks::fail_engine_error(verdict, Location{}, "the engine threw: ", true,
                              "exception: ", e.what());
    return verdict;
  }
  return not_applicable(property, "unknown property");
}

// check_property, given the run of `scenario` where one was already made
// (`known_run`: the calls before a refusal, as the probe ran them).
Verdict check_probed(Property property, const Scenario& scenario, const EngineUnderTest& subject,
                     std::optional<RunResult> known_run) {
  if (const std::string error = scenario.validate(); !error.empty()) {
    return not_applicable(property, "invalid scenario: " + error);
  }
  if (const std::string why = traits_exclude(subject.traits, scenario); !why.empty()) {
    return not_applicable(property, "the engine lacks " + why);
  }
  if (std::string why = never_applicable(property, subject, scenario.model.get()); !why.empty()) {
    return not_applicable(property, std::move(why));
  }
  // A refused step ends the scenario there: the run of the calls before it
  // is `stopped` (which stopped at the refusal), neither probed nor run again.
  const auto check_before_refusal = [&](RunResult stopped) {
    Scenario before = scenario;
    before.calls.resize(size_t(stopped.refused_call));
    stopped.refused = false;
    stopped.refused_call = -1;
    stopped.error_message.clear();
    Verdict verdict = check_probed(property, before, subject, std::move(stopped));
    // No call index here: the campaign groups verdicts by their text.
    const std::string note =
        " (the pool ran dry and refused a step, changing nothing; the calls before it were "
        "checked)";
    if (verdict.applicable && verdict.passed) verdict.summary += note;
    return verdict;
  };
  // A pool sized by the scenario may run dry. The runner checked that the
  // refusal changed nothing; the properties then check the calls before it
  // (docs/OPERATIONS.md, "Small pools"). P1's first run is the scenario's,
  // so it is the probe; other properties are probed first.
  const bool may_run_dry = !known_run && (scenario.pool_blocks > 0 || subject.forces_pool);
  const PropertyRow* row = find_property_row(property);
  const bool first_run_probes = may_run_dry && row != nullptr && row->first_run_probes;
  std::optional<RunResult> failed_probe;
  if (may_run_dry && !first_run_probes) {
    try {
      RunResult probe = run_scenario(scenario, *scenario_weights(scenario), subject.factory);
      if (probe.engine_failed) failed_probe = probe;
      if (probe.refused) return check_before_refusal(std::move(probe));
      if (!probe.engine_failed) known_run = std::move(probe);
    } catch (const std::exception&) {
      // The property's own run reports it.
    }
  }
  Verdict verdict;
  try {
    verdict = run_property(property, scenario, subject, std::move(known_run), first_run_probes);
  } catch (PoolRanDry& dry) {
    return check_before_refusal(std::move(dry.run));
  }
  // A failure of the probe is the engine's: reported unless the property's
  // own run failed too or does not apply (a child that dies once, a race).
  if (failed_probe && verdict.applicable && verdict.passed) {
    return engine_refused(property, *failed_probe, "the scenario");
  }
  return verdict;
}

}  // namespace

std::string never_applicable(Property property, const EngineUnderTest& subject,
                             const Checkpoint* model) {
  const PropertyRow* row = find_property_row(property);
  if (row == nullptr) return "";
  if (const char* why = row->operation_needed(subject.traits.operations)) {
    return std::string("the engine lacks ") + why;
  }
  if (row->never_applicable != nullptr) return row->never_applicable(subject, model);
  return "";
}

Verdict check_property(Property property, const Scenario& scenario,
                       const EngineUnderTest& subject) {
  FeatureUse use(observable_features(subject.traits.operations));
  Verdict verdict = check_probed(property, scenario, subject, std::nullopt);
  verdict.features_used = use.used();
  return verdict;
}

std::span<const Property> check_all_order() {
  return checks::properties_in_check_all_order();
}

Verdict check_all(const Scenario& scenario, const EngineUnderTest& subject) {
  FeatureUse use(observable_features(subject.traits.operations));
  Verdict last;
  for (Property p : check_all_order()) {
    Verdict v = check_property(p, scenario, subject);
    v.features_used = use.used();
    if (!v.passed) return v;
    last = std::move(v);
  }
  last.summary = "every property passed";
  return last;
}

}  // namespace kvcheck
