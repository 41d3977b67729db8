// save s / restore s: a sequence's state kept and brought back
// (Engine::save_state, Engine::restore_state; llama.cpp's
// llama_state_seq_get_data and llama_state_seq_set_data into the same
// sequence, node-llama-cpp's saveStateToFile and loadStateFromFile). The
// engine keeps one saved state per sequence, the last; a restore returns
// the sequence to exactly it: cells, positions, K/V. For the oracle a
// restore is a rollback to the saved content and history, so P1, P6 and
// P12 check what follows against the state at the save
// (docs/OPERATIONS.md, "Save and restore"). One file for both: a restore
// means nothing without its save.
#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_save_restore {

// Contiguous storage without a window: a saved state is a copy of the
// sequence's cells, and no engine yet saves blocks or rings (DECISIONS.md).
std::string scope(const Scenario& scenario) {
  if (scenario.block_size != 0) return "needs contiguous storage (block_size 0)";
  if (scenario.config.sliding_window > 0) {
    return "not with a sliding window (sliding_window " +
           std::to_string(scenario.config.sliding_window) + ")";
  }
  return {};
}

std::string running_in_scope(const ScheduleModel& model, const Call& call, const char* keyword) {
  if (!model.is_running(call.sequence)) {
    return std::string(keyword) + " of sequence " + std::to_string(call.sequence) +
           " which is not running";
  }
  if (std::string why = scope(model.scenario); !why.empty()) return keyword + (": " + why);
  return {};
}

std::string save_precondition(const ScheduleModel& model, const Call& call) {
  return running_in_scope(model, call, "save");
}

std::string restore_precondition(const ScheduleModel& model, const Call& call) {
  if (std::string why = running_in_scope(model, call, "restore"); !why.empty()) return why;
  if (!model.at(call.sequence).saved) {
    return "restore of sequence " + std::to_string(call.sequence) + ", which was never saved";
  }
  return {};
}

void save_apply(ScheduleModel& model, const Call& call) {
  SequenceModel& seq = model.at(call.sequence);
  seq.saved = seq.cells;
}

void restore_apply(ScheduleModel& model, const Call& call) {
  SequenceModel& seq = model.at(call.sequence);
  seq.cells = *seq.saved;
  seq.draft = 0;  // the drafts of its last step are gone or were saved as held
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return traits.operations.save_restore ? "" : "save and restore (sequence state)";
}

std::optional<Call> save_draw(const DrawContext& context, const OperationGenes&) {
  return Call::save(context.sequence);
}

// A restore that changes the sequence: one never saved, or whose cells are
// still the saved ones, is saved instead, so that one operation gene after
// another gives save, a change, restore (a restore right after its save
// would check nothing new).
std::optional<Call> restore_draw(const DrawContext& context, const OperationGenes&) {
  const SequenceModel& seq = context.model.at(context.sequence);
  if (!seq.saved || *seq.saved == seq.cells) return Call::save(context.sequence);
  return Call::restore(context.sequence);
}

constexpr Argument kSaveSyntax[] = {{"save", &Call::sequence, true}};
constexpr Argument kRestoreSyntax[] = {{"restore", &Call::sequence, true}};

// The save keeps the sequence's plan; nothing changes.
void save_plan(PlanBuilder& builder, const Call& call, int) {
  const SchedulePlan& plan = builder.plan;
  const size_t q = size_t(call.sequence);
  builder.saved[q] = SavedPlan{plan.content[q], plan.content_stream[q], plan.cells[q],
                               plan.history[q], plan.content_chunks[q]};
}

// The content, cells, history and chunks return to the save's; a new
// segment starts. P12 treats it as a rollback: a replay of the restored
// content that never fed what came after the save.
void restore_plan(PlanBuilder& builder, const Call& call, int call_index) {
  SchedulePlan& plan = builder.plan;
  const size_t q = size_t(call.sequence);
  const SavedPlan& saved = *builder.saved[q];
  plan.plain[q] = false;
  plan.truncated[q] = true;
  builder.close(q);
  plan.content[q] = saved.content;
  plan.content_stream[q] = saved.content_stream;
  plan.cells[q] = saved.cells;
  plan.history[q] = saved.history;
  plan.content_chunks[q] = saved.content_chunks;
  builder.reopen(q, call_index);
}

void save_run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  target.engine().save_state(seq.id);
  seq.saved_cells = seq.cells;
}

void restore_run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  target.engine().restore_state(seq.id);
  seq.cells = *seq.saved_cells;
  seq.held = static_cast<int>(seq.cells.size());
}

// A save records the length; a restore returns to it.
bool normalize_save(Call& call, ContentLengths& lengths) {
  if (lengths.valid(call.sequence)) {
    lengths.saved[size_t(call.sequence)] = lengths.held[size_t(call.sequence)];
  }
  return true;
}

bool normalize_restore(Call& call, ContentLengths& lengths) {
  if (lengths.valid(call.sequence)) {
    lengths.held[size_t(call.sequence)] = lengths.saved[size_t(call.sequence)];
  }
  return true;
}

}  // namespace op_save_restore

extern const Operation kSaveOperation{.kind = Call::Kind::kSave,
                                      .keyword = "save",
                                      .syntax = op_save_restore::kSaveSyntax,
                                      .weight = 1,
                                      .precondition = op_save_restore::save_precondition,
                                      .apply = op_save_restore::save_apply,
                                      .plan = op_save_restore::save_plan,
                                      .run = op_save_restore::save_run,
                                      .needs = op_save_restore::needs,
                                      .scope = op_save_restore::scope,
                                      .draw = op_save_restore::save_draw,
                                      .normalize = op_save_restore::normalize_save};

// A restore frees the cells the sequence held past the saved ones (P14).
extern const Operation kRestoreOperation{.kind = Call::Kind::kRestore,
                                         .keyword = "restore",
                                         .syntax = op_save_restore::kRestoreSyntax,
                                         .weight = 3,
                                         .precondition = op_save_restore::restore_precondition,
                                         .apply = op_save_restore::restore_apply,
                                         .plan = op_save_restore::restore_plan,
                                         .run = op_save_restore::restore_run,
                                         .needs = op_save_restore::needs,
                                         .scope = op_save_restore::scope,
                                         .draw = op_save_restore::restore_draw,
                                         .normalize = op_save_restore::normalize_restore,
                                         .releases = true};

}  // namespace kvcheck
