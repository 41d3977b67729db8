// The rows of the property table (property_table.h says why there is one
// table). Each check is declared here, next to its row, and defined in its
// own file under checks/.
#include "properties/property_table.h"

#include <array>

namespace kvcheck::checks {

Verdict check_oracle(const Context& context);        // checks/p01_oracle.cpp
Verdict check_chunking(const Context& context);      // checks/p02_chunking.cpp
Verdict check_batch(const Context& context);         // checks/p03_batch.cpp
Verdict check_reset(const Context& context);         // checks/p04_reset.cpp
Verdict check_compaction(const Context& context);    // checks/p05_compaction.cpp
Verdict check_cache_state(const Context& context);   // checks/p06_cache_state.cpp
Verdict check_gqa(const Context& context);           // checks/p07_gqa.cpp
Verdict check_determinism(const Context& context);   // checks/p08_determinism.cpp
Verdict check_capacity(const Context& context);      // checks/p09_capacity.cpp
Verdict check_cross_engine(const Context& context);  // checks/p10_cross_engine.cpp
Verdict check_sharing(const Context& context);       // checks/p11_sharing.cpp
Verdict check_rollback(const Context& context);      // checks/p12_rollback.cpp
Verdict check_pool(const Context& context);          // checks/p13_pool.cpp
Verdict check_poison(const Context& context);        // checks/p14_poison.cpp
Verdict check_prefix(const Context& context);        // checks/p15_prefix.cpp

namespace {

// The properties that compare with the oracle, or run the engine against
// itself only to check state, promise nothing an engine can declare.
constexpr Invariance bitwise(const EngineTraits&) {
  return Invariance::kBitwise;
}
constexpr const char* nothing(const OperationTraits&) {
  return nullptr;
}

// Data, not a function: one row of ten named fields per property, in enum
// order, so its length grows by a row with each property.
constexpr PropertyRow kRows[] = {
    {.property = Property::kOracle,
     .name = "oracle",
     .label = "P1",
     .invariance = bitwise,
     .operation_needed = nothing,
     .needs_bound = true,
     .never_applicable = nullptr,
     .first_run_probes = true,
     .check = check_oracle,
     .check_all_place = 3},
    {.property = Property::kChunking,
     .name = "chunking",
     .label = "P2",
     .invariance = [](const EngineTraits& t) { return t.invariance.chunking; },
     .operation_needed = nothing,
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_chunking,
     .check_all_place = 4},
    {.property = Property::kBatch,
     .name = "batch",
     .label = "P3",
     .invariance = [](const EngineTraits& t) { return t.invariance.batch; },
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.multi_sequence_step ? nullptr : "several sequences in one step";
     },
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_batch,
     .check_all_place = 5},
    {.property = Property::kReset,
     .name = "reset",
     .label = "P4",
     .invariance = [](const EngineTraits& t) { return t.invariance.reset; },
     .operation_needed = nothing,
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_reset,
     .check_all_place = 6},
    {.property = Property::kCompaction,
     .name = "compaction",
     .label = "P5",
     .invariance = [](const EngineTraits& t) { return t.invariance.compaction; },
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.finish ? nullptr : "finish";
     },
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_compaction,
     .check_all_place = 7},
    // First in check_all: it compares the cache itself after every call, so
    // it sees a fault before any logit does and names the layer and slots.
    {.property = Property::kCacheState,
     .name = "cache_state",
     .label = "P6",
     .invariance = bitwise,
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.cache_snapshot ? nullptr : "cache snapshots";
     },
     .needs_bound = true,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_cache_state,
     .check_all_place = 0},
    {.property = Property::kGqa,
     .name = "gqa",
     .label = "P7",
     .invariance = [](const EngineTraits& t) { return t.invariance.gqa_twin; },
     .operation_needed = nothing,
     .needs_bound = false,
     .never_applicable = [](const EngineUnderTest& subject,
                            const Checkpoint* model) -> std::string {
       if (model != nullptr && model->config.n_kv_heads == model->config.n_heads) {
         return "the checkpoint is MHA (n_kv_heads == n_heads)";
       }
       if (subject.traits.limits.mha_only)
         return "the engine takes MHA models only (limits.mha_only)";
       return "";
     },
     .first_run_probes = false,
     .check = check_gqa,
     .check_all_place = 11},
    {.property = Property::kDeterminism,
     .name = "determinism",
     .label = "P8",
     .invariance = [](const EngineTraits& t) { return t.invariance.determinism; },
     .operation_needed = nothing,
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_determinism,
     .check_all_place = 12},
    // Its "others intact" comparison follows the batch promise: its row
    // promises bitwise and the check reads the batch promise itself.
    {.property = Property::kCapacity,
     .name = "capacity",
     .label = "P9",
     .invariance = bitwise,
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.capacity_refusal ? nullptr : "a capacity refusal";
     },
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_capacity,
     .check_all_place = 13},
    {.property = Property::kCrossEngine,
     .name = "cross_engine",
     .label = "P10",
     .invariance = bitwise,
     .operation_needed = nothing,
     .needs_bound = true,
     .never_applicable = [](const EngineUnderTest& subject, const Checkpoint*) -> std::string {
       return subject.reference ? "" : "no reference engine given (--reference)";
     },
     .first_run_probes = false,
     .check = check_cross_engine,
     .check_all_place = 14},
    {.property = Property::kSharing,
     .name = "sharing",
     .label = "P11",
     .invariance = [](const EngineTraits& t) { return t.invariance.sharing; },
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.fork ? nullptr : "fork";
     },
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_sharing,
     .check_all_place = 8},
    {.property = Property::kRollback,
     .name = "rollback",
     .label = "P12",
     .invariance = [](const EngineTraits& t) { return t.invariance.rollback; },
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.truncate ? nullptr : "truncate";
     },
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_rollback,
     .check_all_place = 9},
    {.property = Property::kPool,
     .name = "pool",
     .label = "P13",
     .invariance = bitwise,
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.paged && op.pool_report ? nullptr : "a pool report of paged storage";
     },
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_pool,
     .check_all_place = 1},
    {.property = Property::kPoison,
     .name = "poison",
     .label = "P14",
     .invariance = bitwise,
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.storage_check ? nullptr : "a check of unheld storage";
     },
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_poison,
     .check_all_place = 2},
    {.property = Property::kPrefix,
     .name = "prefix",
     .label = "P15",
     // A hit shares another sequence's blocks.
     .invariance = [](const EngineTraits& t) { return t.invariance.sharing; },
     .operation_needed = [](const OperationTraits& op) -> const char* {
       return op.prefix_cache && op.paged ? nullptr : "a prefix cache";
     },
     .needs_bound = false,
     .never_applicable = nullptr,
     .first_run_probes = false,
     .check = check_prefix,
     .check_all_place = 10},
};
static_assert(std::size(kRows) == size_t(kPropertyCount), "one row per property");

// Row i is the enum's value i, and the places are 0..n-1 once each: a row
// out of place or a place taken twice does not compile.
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < std::size(kRows); ++i) {
    if (kRows[i].property != static_cast<Property>(i)) return false;
  }
  return true;
}
static_assert(rows_in_enum_order());

constexpr std::array<Property, kPropertyCount> order_by_place() {
  std::array<Property, kPropertyCount> order{};
  std::array<bool, kPropertyCount> taken{};
  for (const PropertyRow& row : kRows) {
    const int place = row.check_all_place;
    if (place < 0 || place >= kPropertyCount || taken[size_t(place)]) throw "bad check_all_place";
    taken[size_t(place)] = true;
    order[size_t(place)] = row.property;
  }
  return order;
}
constexpr std::array<Property, kPropertyCount> kCheckAllOrder = order_by_place();

}  // namespace

const PropertyRow* find_property_row(Property property) {
  const int i = static_cast<int>(property);
  return i >= 0 && i < kPropertyCount ? &kRows[size_t(i)] : nullptr;
}

const PropertyRow& property_row(Property property) {
  return *find_property_row(property);
}

std::span<const PropertyRow> property_rows() {
  return kRows;
}

std::span<const Property> properties_in_check_all_order() {
  return kCheckAllOrder;
}

}  // namespace kvcheck::checks
