// A plugin whose engine takes its process down on its first step, as the
// option says: crash=segv (SIGSEGV), crash=abort (abort()), crash=hang (never
// returns). kvcheck must report each as a failing property with a case file
// and go on to write every report (tests/tools/campaign_verdict_test.py).
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "tests/backends/plugin_export.h"

struct kvcheck_engine {
  char crash[8];
  int64_t next_sequence;
};

namespace {

int32_t input_error(kvcheck_error* error, const char* message) {
  error->code = KVCHECK_ERR_INPUT;
  std::strncpy(error->message, message, sizeof(error->message) - 1);
  return KVCHECK_ERR_INPUT;
}

const char* traits_json(const char*, kvcheck_error*) {
  return R"({"identity": {"name": "crash-plugin", "version": "1"},
             "operations": {"finish": false, "reset": false, "cache_snapshot": false,
                            "capacity_refusal": false}})";
}

kvcheck_engine* create(const kvcheck_create_args* args, kvcheck_error* error) {
  const char* crash = std::strstr(args->options, "crash=");
  if (crash == nullptr) {
    input_error(error, "crash_plugin: give ?crash=segv, abort or hang");
    return nullptr;
  }
  auto* engine = new kvcheck_engine{};
  std::strncpy(engine->crash, crash + 6, sizeof(engine->crash) - 1);
  return engine;
}

void destroy(kvcheck_engine* engine) {
  delete engine;
}

int32_t start(kvcheck_engine* engine, int64_t* sequence, kvcheck_error*) {
  *sequence = engine->next_sequence++;
  return KVCHECK_OK;
}

int32_t step(kvcheck_engine* engine, const kvcheck_batch_entry*, int32_t, float*,
             kvcheck_error* error) {
  if (std::strncmp(engine->crash, "segv", 4) == 0) raise(SIGSEGV);
  if (std::strncmp(engine->crash, "abort", 5) == 0) std::abort();
  if (std::strncmp(engine->crash, "hang", 4) == 0) {
    for (;;) pause();
  }
  return input_error(error, "crash_plugin: unknown crash= option");
}

int32_t length(kvcheck_engine*, int64_t, int32_t* length, kvcheck_error*) {
  *length = 0;
  return KVCHECK_OK;
}

const kvcheck_plugin_v1 kTable = {KVCHECK_PLUGIN_ABI_VERSION,
                                  KVCHECK_PLUGIN_CORE_SIZE,
                                  traits_json,
                                  create,
                                  destroy,
                                  start,
                                  step,
                                  nullptr,  // finish
                                  nullptr,  // reset
                                  length,
                                  nullptr,   // cache
                                  nullptr,   // fork
                                  nullptr,   // truncate
                                  nullptr,   // pool_json
                                  nullptr,   // storage_check
                                  nullptr,   // reused
                                  nullptr,   // flush_prefix_cache
                                  nullptr,   // erase
                                  nullptr,   // shift
                                  nullptr,   // cache_positions
                                  nullptr,   // abort
                                  nullptr,   // start_keyed: no cache keys
                                  nullptr,   // offload: no host tier
                                  nullptr,   // save: no save and restore
                                  nullptr};  // restore

}  // namespace

KVCHECK_TEST_EXPORT_TABLE(&kTable)
