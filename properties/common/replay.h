// P11, P12 and P15 check one thing of different sequences: a sequence's
// logits, where its final content still holds the token it was fed, equal
// a solo run of that content on a fresh engine fed in the same chunks (the
// parent's cut at n for a fork's prefix, the chunks left after a
// truncation): never shared (P11), never fed what was forgotten (P12),
// never took a prefix from the cache (P15: a warm hit against a cold run,
// SGLang #34683). The oracle of all is the content alone. Each property
// says which sequences it selects and what its replay is called; this is
// the comparison they share.
#pragma once

#include "properties/common/context.h"

namespace kvcheck::checks {

struct ReplayKind {
  Property property;
  // Selects by what the scenario's run did (P15: the sequences the engine
  // says hit), so that run comes before the selection.
  bool selects_by_run;
  // Whether sequence s is one the property checks (`run` is empty unless
  // selects_by_run).
  bool (*involved)(const SchedulePlan& plan, const RunResult& run, size_t s);
  const char* none_selected;  // why it does not apply when none is
  const char* replay;         // the replay, in a failure's text
  const char* passed;         // after the count of sequences, when all match
};

Verdict check_replay(const Context& context, const ReplayKind& kind);

}  // namespace kvcheck::checks
