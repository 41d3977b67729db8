// One plugin per way of getting the ABI wrong, chosen by a compile
// definition (tests/backends/CMakeLists.txt builds each as its own module).
// The loader must refuse every one with a message naming the problem,
// before it calls create. OLD_TABLE and V2_TABLE are the right ways among
// them: a version-1 table of the first header's size that declares no fork,
// which must load with fork absent although a fork function lies past its
// end; a version-2 table, which must load without save and restore although
// their functions lie past its end. BAD_V2_SAVE_RESTORE is a version-2 table
// of the whole size that declares save_restore: version 2 has no such
// functions, so what lies past offload is never read and the loader refuses.
#include <cstddef>
#include <cstdint>

#include "tests/backends/plugin_export.h"

namespace {

// An engine that never runs: the loader refuses these plugins first.
kvcheck_engine* create(const kvcheck_create_args*, kvcheck_error*) {
  return nullptr;
}
void destroy(kvcheck_engine*) {}
int32_t start(kvcheck_engine*, int64_t*, kvcheck_error*) {
  return KVCHECK_ERR_INTERNAL;
}
[[maybe_unused]] int32_t step(kvcheck_engine*, const kvcheck_batch_entry*, int32_t, float*,
                              kvcheck_error*) {
  return KVCHECK_ERR_INTERNAL;
}
int32_t length(kvcheck_engine*, int64_t, int32_t*, kvcheck_error*) {
  return KVCHECK_ERR_INTERNAL;
}
[[maybe_unused]] int32_t fork(kvcheck_engine*, int64_t, int32_t, int64_t*, kvcheck_error*) {
  return KVCHECK_ERR_INTERNAL;
}
[[maybe_unused]] int32_t cache(kvcheck_engine*, int64_t, int32_t, float*, float*, int64_t,
                               kvcheck_error*) {
  return KVCHECK_ERR_INTERNAL;
}
[[maybe_unused]] int32_t save_or_restore(kvcheck_engine*, int64_t, kvcheck_error*) {
  return KVCHECK_ERR_INTERNAL;
}

const char* traits_json(const char*, kvcheck_error*) {
#if defined(BAD_TRAITS_INVALID)
  return "{\"identity\": {\"name\": \"bad\"";
#elif defined(BAD_TRAITS_CONTRADICT)
  return R"({"identity": {"name": "bad"}, "limits": {"min_head_dim": 64, "max_head_dim": 32}})";
#elif defined(BAD_DECLARED_NULL)
  // finish is declared (the default) but its function is NULL below.
  return R"({"identity": {"name": "bad"}, "operations": {"reset": false,
             "cache_snapshot": false}})";
#elif defined(BAD_DECLARED_FORK_NULL) || defined(BAD_SHORT_TABLE_FORK)
  // fork is declared but the table has no fork function (NULL below).
  return R"({"identity": {"name": "bad"}, "operations": {"finish": false, "reset": false,
             "cache_snapshot": false, "fork": true}})";
#elif defined(BAD_V2_SAVE_RESTORE)
  return R"({"identity": {"name": "bad"}, "operations": {"finish": false, "reset": false,
             "cache_snapshot": false, "save_restore": true}})";
#elif defined(BAD_WINDOW_NO_POSITIONS)
  // A sliding window with snapshots, but no cache_positions (NULL below):
  // a ring's snapshot could not say which positions its slots hold.
  return R"({"identity": {"name": "bad"}, "operations": {"finish": false, "reset": false,
             "sliding_window": true}})";
#else
  return R"({"identity": {"name": "bad"}, "operations": {"finish": false, "reset": false,
             "cache_snapshot": false}})";
#endif
}

constexpr uint32_t kAbi =
#ifdef BAD_ABI_VERSION
    KVCHECK_PLUGIN_ABI_VERSION + 1;
#elif defined(OLD_TABLE)
    1;  // a version-1 plugin: still loads
#elif defined(V2_TABLE) || defined(BAD_V2_SAVE_RESTORE)
    2;                       // a version-2 plugin: loads, without save and restore
#else
    KVCHECK_PLUGIN_ABI_VERSION;
#endif
constexpr uint32_t kSize =
#ifdef BAD_STRUCT_SIZE
    offsetof(kvcheck_plugin_v1, reset);
#elif defined(BAD_SHORT_TABLE_FORK) || defined(OLD_TABLE)
    // A table of the first header's size: its fork below lies past struct_size
    // and must not be read.
    KVCHECK_PLUGIN_CORE_SIZE;
#elif defined(V2_TABLE)
    KVCHECK_PLUGIN_V2_SIZE;  // the version-2 header's sizeof
#else
    sizeof(kvcheck_plugin_v1);
#endif

const kvcheck_plugin_v1 kTable = {kAbi,
                                  kSize,
                                  traits_json,
                                  create,
                                  destroy,
                                  start,
#ifdef BAD_NULL_STEP
                                  nullptr,
#else
                                  step,
#endif
                                  nullptr,  // finish
                                  nullptr,
                                  length,
#ifdef BAD_WINDOW_NO_POSITIONS
                                  cache,
#else
                                  nullptr,
#endif
#if defined(BAD_SHORT_TABLE_FORK) || defined(OLD_TABLE)
                                  fork,
#else
                                  nullptr,
#endif
                                  nullptr,  // truncate
                                  nullptr,  // pool_json
                                  nullptr,  // storage_check
                                  nullptr,  // reused
                                  nullptr,  // flush_prefix_cache
                                  nullptr,  // erase
                                  nullptr,  // shift
                                  nullptr,  // cache_positions
                                  nullptr,  // abort
                                  nullptr,  // start_keyed: no cache keys
                                  nullptr,  // offload: no host tier
#if defined(V2_TABLE) || defined(BAD_V2_SAVE_RESTORE)
                                  save_or_restore,  // past a version-2 table: never read
                                  save_or_restore};
#else
                                  nullptr,   // save
                                  nullptr};  // restore
#endif

}  // namespace

#ifdef BAD_MISSING_SYMBOL
extern "C" __attribute__((visibility("default"))) const kvcheck_plugin_v1* kvcheck_plugin_v2() {
  return &kTable;
}
#else
KVCHECK_TEST_EXPORT_TABLE(&kTable)
#endif
