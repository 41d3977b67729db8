// Runs a RapidCheck property as the current GoogleTest with its own default
// case count. RC_GTEST_PROP takes every count from RC_PARAMS, one for the
// whole binary; the properties differ in cost by 10x, so each test carries
// its count here and RC_PARAMS still overrides it (docs/GENERATORS.md).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include <rapidcheck.h>

#include "properties/rc/generators.h"
#include "properties/rc/hunt.h"
#include "properties/scenario.h"

namespace kvcheck::test {

inline bool rc_params_set(const char* key) {
  const char* params = std::getenv("RC_PARAMS");
  return params != nullptr && std::string(params).find(key) != std::string::npos;
}

// How often each shape the generators promise occurred, tag by tag.
struct CoverageTally {
  int cases = 0;
  int gpt2 = 0, mha = 0, gqa = 0, mqa = 0, batched = 0, mixed = 0, one_token = 0, reset = 0,
      finish = 0, reused_row = 0, at_capacity = 0, reduced_dtype = 0;

  void add(const rcgen::Coverage& c) {
    ++cases;
    gpt2 += c.gpt2, mha += c.mha, gqa += c.gqa, mqa += c.mqa;
    batched += c.batched_step, mixed += c.mixed_step, one_token += c.one_token_chunk;
    reset += c.reset, finish += c.finish, reused_row += c.reused_row;
    at_capacity += c.at_capacity, reduced_dtype += c.reduced_dtype;
  }

  std::string text() const {
    std::ostringstream out;
    const auto share = [&](const char* name, int n) {
      out << " " << name << " " << (cases > 0 ? 100 * n / cases : 0) << "%";
    };
    out << "coverage of " << cases << " cases:";
    share("gpt2", gpt2), share("llama", cases - gpt2), share("mha", mha), share("gqa", gqa);
    share("mqa", mqa), share("batched", batched), share("prefill+decode step", mixed);
    share("1-token chunk", one_token), share("reset", reset), share("finish", finish);
    share("reused row", reused_row), share("at capacity", at_capacity);
    share("bf16/f16", reduced_dtype);
    return out.str();
  }
};

// Runs body on `default_cases` scenarios from rcgen::scenario(emphasis) (or
// RC_PARAMS' max_success), prints the seed, and fails the test with the
// shrunk counterexample.
inline void check_scenarios(int default_cases, rcgen::Emphasis emphasis,
                            const std::function<void(const Scenario&)>& body,
                            const EngineTraits& traits = EngineTraits::strict()) {
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  rcgen::load_rapidcheck_configuration_quietly();  // the seed is printed below
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  if (!rc_params_set("max_success")) params.maxSuccess = default_cases;
  std::cout << metadata.id << ": seed=" << params.seed << " max_success=" << params.maxSuccess
            << " max_size=" << params.maxSize << " (reproduce: RC_PARAMS=\"seed=" << params.seed
            << "\" --gtest_filter=" << info->test_suite_name() << "." << info->name() << ")"
            << std::endl;

  const rc::Gen<Scenario> scenarios = rcgen::scenario(emphasis, traits);
  CoverageTally tally;
  const auto property = [&] {
    const Scenario s = *scenarios;
    tally.add(rcgen::coverage(s));
    body(s);
  };
  const rc::detail::TestResult result = rc::detail::checkTestable(property, metadata, params);
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  if (result.template is<rc::detail::SuccessResult>()) {
    // RapidCheck's distribution lists every combination of tags; the share of
    // each tag alone is what tells whether a shape is covered.
    std::cout << message.str() << "\n" << tally.text() << std::endl;
  } else {
    FAIL() << message.str() << "\nseed=" << params.seed << "\n";
  }
}

// Tags the coverage the suite promises (docs/GENERATORS.md).
inline void classify(const Scenario& s) {
  const rcgen::Coverage c = rcgen::coverage(s);
  RC_TAG(c.gpt2 ? "gpt2" : "llama");
  RC_TAG(c.mha ? "mha" : c.gqa ? "gqa" : "mqa");
  RC_CLASSIFY(c.batched_step, "batched");
  RC_CLASSIFY(c.reset, "reset");
  RC_CLASSIFY(c.finish, "finish");
  RC_CLASSIFY(c.one_token_chunk, "1-token chunk");
  RC_CLASSIFY(c.at_capacity, "at capacity");
}

}  // namespace kvcheck::test
