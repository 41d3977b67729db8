/* kvcheck engine plugin ABI, version 3 (docs/ENGINES.md).
 *
 * Plain C, so that an engine in any language with a C FFI can be loaded with
 * `--backend plugin:PATH.so[?key=value&...]`. The shared object exports one
 * function, kvcheck_plugin_entry_v1, returning a table of functions. The table
 * starts with its ABI version and its size in bytes: later versions append
 * functions, and kvcheck reads only what struct_size covers (a plugin built
 * against an older header has a smaller struct_size and its table ends
 * earlier: the functions past its end are absent). An operation the engine
 * lacks is NULL and is declared absent in the traits.
 *
 * Every function that can fail returns 0 on success or a KVCHECK_ERR_* code,
 * and writes a message into the caller's kvcheck_error. The capacity refusal
 * is KVCHECK_ERR_CAPACITY; after any error the engine must be unchanged.
 *
 * A plugin runs inside kvcheck's process: a crash there ends the run. Engines
 * that may crash belong out of process (docs/ENGINE_PROTOCOL.md).
 */
#ifndef KVCHECK_ENGINE_PLUGIN_H
#define KVCHECK_ENGINE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version 2 appends `offload` and kvcheck_create_args's `host_blocks`;
 * version 3 appends `save` and `restore`. kvcheck loads tables of every
 * version: one of version 1 ends at start_keyed and one of version 2 at
 * offload (it never reads past that, whatever struct_size says). */
#define KVCHECK_PLUGIN_ABI_VERSION 3u

enum kvcheck_error_code {
  KVCHECK_OK = 0,
  KVCHECK_ERR_CAPACITY = 1,         /* a sequence would pass the capacity */
  KVCHECK_ERR_ROWS = 2,             /* no free row for start */
  KVCHECK_ERR_UNKNOWN_SEQUENCE = 3, /* not a running sequence */
  KVCHECK_ERR_BAD_BATCH = 4,        /* e.g. a sequence twice in one step */
  KVCHECK_ERR_BAD_TOKEN = 5,        /* token outside the vocabulary */
  KVCHECK_ERR_DEVICE = 6,           /* out of memory, device failure */
  KVCHECK_ERR_INPUT = 7,            /* create: a model or option the engine refuses */
  KVCHECK_ERR_INTERNAL = 8          /* anything else */
};

typedef struct kvcheck_error {
  int32_t code;
  char message[512]; /* NUL-terminated */
} kvcheck_error;

/* One tensor of the model in kvcheck's canonical names and layouts
 * (docs/WEIGHTS.md: "tok_embedding", "layers.0.wq", ... row-major f32). */
typedef struct kvcheck_tensor {
  const char* name;
  int32_t rank;
  int64_t shape[4];
  const float* data; /* valid only during create */
} kvcheck_tensor;

/* One field of the model config, already parsed (kvcheck_create_args's
 * config_values): the key as in config_json; `text` for a string field
 * ("family"), NULL otherwise; `number` for the rest (booleans 0 or 1). */
typedef struct kvcheck_config_value {
  const char* key;
  const char* text;
  double number;
} kvcheck_config_value;

typedef struct kvcheck_create_args {
  uint32_t struct_size;    /* sizeof(kvcheck_create_args) of the caller */
  const char* config_json; /* the model config (docs/CASE_FORMAT.md keys) */
  const kvcheck_tensor* tensors;
  int64_t n_tensors;
  int32_t capacity;     /* positions per sequence (or in all, if shared) */
  int32_t max_rows;     /* sequences alive at once */
  const char* kv_dtype; /* "f32", "bf16", "f16", "q8_0" (when the traits list it) */
  const char* options;  /* the backend string's "key=value&..." after '?', or "" */
  /* Appended (read them only when struct_size covers them): paged storage
   * (traits "paged", docs/OPERATIONS.md). block_size 0 is contiguous rows;
   * 1..32 a pool of pool_blocks blocks of that many slots (0: the default). */
  int32_t block_size;
  int32_t pool_blocks;
  /* Appended: 1 asks for the prefix cache (traits "prefix_cache"; paged
   * storage only, docs/OPERATIONS.md), 0 for none. */
  int32_t prefix_cache;
  /* Appended: the same config as config_json, as (key, value) pairs, so that
   * a plugin need not parse JSON for every engine (a campaign makes a new
   * model for nearly every case). Both forms always hold the same fields;
   * read either. */
  const kvcheck_config_value* config_values;
  int64_t n_config_values;
  /* Appended in version 2: blocks of a host memory tier (traits "offload";
   * paged storage only, docs/OPERATIONS.md, "Offload"); 0 for none. */
  int32_t host_blocks;
} kvcheck_create_args;

typedef struct kvcheck_batch_entry {
  int64_t sequence;
  const int32_t* tokens;
  int32_t n_tokens;
} kvcheck_batch_entry;

typedef struct kvcheck_engine kvcheck_engine; /* opaque to kvcheck */

typedef struct kvcheck_plugin_v1 {
  uint32_t abi_version; /* KVCHECK_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(kvcheck_plugin_v1) */

  /* The engine's traits as JSON (docs/ENGINES.md), for the given options.
   * The string stays valid until the plugin is unloaded. NULL on error. */
  const char* (*traits_json)(const char* options, kvcheck_error* error);

  kvcheck_engine* (*create)(const kvcheck_create_args* args, kvcheck_error* error);
  void (*destroy)(kvcheck_engine* engine);

  int32_t (*start)(kvcheck_engine* engine, int64_t* sequence, kvcheck_error* error);
  /* Feeds every entry; writes [sum of n_tokens][vocab] logits, entries in
   * batch order. `logits` has room for exactly that many floats. */
  int32_t (*step)(kvcheck_engine* engine, const kvcheck_batch_entry* batch, int32_t n_entries,
                  float* logits, kvcheck_error* error);
  int32_t (*finish)(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error); /* or NULL */
  int32_t (*reset)(kvcheck_engine* engine, kvcheck_error* error);                    /* or NULL */
  int32_t (*length)(kvcheck_engine* engine, int64_t sequence, int32_t* length,
                    kvcheck_error* error);
  /* One layer's cached K and V of a sequence, widened to f32,
   * [length][n_kv_heads][head_dim] each; `capacity` is the room in floats of
   * each buffer. Or NULL when the engine offers no snapshots. */
  int32_t (*cache)(kvcheck_engine* engine, int64_t sequence, int32_t layer, float* k, float* v,
                   int64_t capacity, kvcheck_error* error);

  /* ---- appended: the operations of docs/OPERATIONS.md --------------------
   * Read only when struct_size covers them; NULL unless the traits declare
   * the operation ("fork", "truncate", "pool_report", "storage_check",
   * "prefix_cache"). */

  /* A new running sequence whose cache starts as the parent's first n tokens
   * (0 <= n <= its length); writes its id to *child. KVCHECK_ERR_ROWS when
   * no row is free. Parent and child are independent afterwards. */
  int32_t (*fork)(kvcheck_engine* engine, int64_t parent, int32_t n, int64_t* child,
                  kvcheck_error* error);
  /* Forgets the last n tokens of the sequence (0 <= n <= its length): it goes
   * on as if they had never been fed. */
  int32_t (*truncate)(kvcheck_engine* engine, int64_t sequence, int32_t n, kvcheck_error* error);
  /* The paged pool (traits "pool_report") as JSON, in the form of the engine
   * protocol's "pool" reply (docs/ENGINE_PROTOCOL.md): {"block_size", "total",
   * "free", "used", "cached", "refcounts": [...], "tables": [{"sequence",
   * "blocks": [...]}]}. Valid until the next call on this engine; NULL on
   * error. */
  const char* (*pool_json)(kvcheck_engine* engine, kvcheck_error* error);
  /* Debug read of raw storage (traits "storage_check"): "" when every slot no
   * sequence holds is poisoned (NaN), else where the first one that is not
   * lies. Valid until the next call on this engine; NULL on error. */
  const char* (*storage_check)(kvcheck_engine* engine, kvcheck_error* error);
  /* Prefix cache (traits "prefix_cache"): writes to *reused how many leading
   * tokens of the sequence's last step were taken from the cache instead of
   * computed (their logits rows are NaN; 0 for a sequence never stepped). */
  int32_t (*reused)(kvcheck_engine* engine, int64_t sequence, int32_t* reused,
                    kvcheck_error* error);
  /* Prefix cache: forgets every cached block; blocks no table holds become
   * free (and poisoned). Running sequences keep their blocks. */
  int32_t (*flush_prefix_cache)(kvcheck_engine* engine, kvcheck_error* error);

  /* ---- appended: erase and shift (docs/OPERATIONS.md, "Erase and shift")
   * Read only when struct_size covers them; NULL unless the traits declare
   * "erase" / "shift". */

  /* Removes the cells holding positions [p0, p1) (0 <= p0 <= p1), leaving a
   * gap; the next fed token goes at the largest held position + 1. */
  int32_t (*erase)(kvcheck_engine* engine, int64_t sequence, int32_t p0, int32_t p1,
                   kvcheck_error* error);
  /* Adds delta to the positions of the cells in [p0, p1), re-rotating their
   * keys (values unchanged); KVCHECK_ERR_BAD_BATCH, changing nothing, when a
   * position would leave [0, max_pos) or two cells would hold one. */
  int32_t (*shift)(kvcheck_engine* engine, int64_t sequence, int32_t p0, int32_t p1, int32_t delta,
                   kvcheck_error* error);

  /* ---- appended: the positions of a snapshot's slots (docs/OPERATIONS.md,
   * "Erase and shift" and "Sliding windows"). Read only when struct_size
   * covers it; required with the traits "sliding_window" and
   * "cache_snapshot", optional otherwise (without it kvcheck takes `cache`
   * to write `length` slots, slot i at position i). */

  /* Called before `cache` for the same sequence and layer: writes to *slots
   * how many slots `cache` writes (the sequence's length, or a windowed
   * layer's ring of R slots once it holds more than R tokens), and, when
   * slot i does not hold position i (after an erase or a shift, a ring that
   * has wrapped), their absolute positions in slot order to
   * positions[0 .. *slots) and 1 to *listed; else 0 to *listed (positions
   * untouched). `capacity` is the room of `positions` in elements. */
  int32_t (*cache_positions)(kvcheck_engine* engine, int64_t sequence, int32_t layer,
                             int32_t* positions, int64_t capacity, int32_t* slots, int32_t* listed,
                             kvcheck_error* error);

  /* ---- appended: abort (docs/OPERATIONS.md, "Abort"). Read only when
   * struct_size covers it; NULL unless the traits declare "abort", and then
   * kvcheck ends an aborted sequence with `finish`. A request cancelled
   * before its stream was fed (between prefill chunks): the sequence ends as
   * finish ends it; only blocks it wrote whole may stay in a prefix cache. */
  int32_t (*abort)(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error);

  /* ---- appended: cache keys (docs/OPERATIONS.md, "Cache keys"). Read only
   * when struct_size covers it; NULL unless the traits declare "cache_keys".
   * start, for a request with a cache key (a cache salt, an adapter id;
   * never 0): its prefix-cache blocks are shared only with sequences of the
   * same key. */
  int32_t (*start_keyed)(kvcheck_engine* engine, uint64_t cache_key, int64_t* sequence,
                         kvcheck_error* error);

  /* ---- appended in version 2: offload (docs/OPERATIONS.md, "Offload").
   * Read only when struct_size covers it and abi_version is 2; NULL unless
   * the traits declare "offload". Moves every block of the sequence's table
   * held in device memory to the host tier (host_blocks); the next step
   * that feeds it brings them back first. KVCHECK_ERR_CAPACITY, changing
   * nothing, when the host tier (or, on the way back, the pool) is full. */
  int32_t (*offload)(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error);

  /* ---- appended in version 3: save and restore (docs/OPERATIONS.md, "Save
   * and restore"; llama.cpp's llama_state_seq_get_data / set_data). Read
   * only when struct_size covers them and abi_version is 3 or more; both
   * NULL unless the traits declare "save_restore". */

  /* Keeps a copy of the sequence's state (its cells, their positions and
   * K/V), replacing the copy kept before. A finish, abort or reset of the
   * sequence drops it. */
  int32_t (*save)(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error);
  /* Returns the sequence to exactly the state of its last save; later steps
   * continue from it (the next position is the largest restored + 1).
   * KVCHECK_ERR_BAD_BATCH, changing nothing, for a sequence never saved. */
  int32_t (*restore)(kvcheck_engine* engine, int64_t sequence, kvcheck_error* error);
} kvcheck_plugin_v1;

/* struct_size of a version-1 (version-2) table with every function of that
 * version. */
#define KVCHECK_PLUGIN_V1_SIZE offsetof(kvcheck_plugin_v1, offload)
#define KVCHECK_PLUGIN_V2_SIZE offsetof(kvcheck_plugin_v1, save)

/* struct_size of a table that ends at `cache` (the first version of this
 * header); kvcheck accepts it and any longer one. */
#define KVCHECK_PLUGIN_CORE_SIZE offsetof(kvcheck_plugin_v1, fork)

/* The one symbol a plugin exports, a function returning its table (static
 * storage). Not named kvcheck_plugin_v1: that name is the table's type. */
typedef const kvcheck_plugin_v1* (*kvcheck_plugin_entry_fn)(void);
#define KVCHECK_PLUGIN_ENTRY "kvcheck_plugin_entry_v1"
const kvcheck_plugin_v1* kvcheck_plugin_entry_v1(void);

#ifdef __cplusplus
}
#endif

#endif /* KVCHECK_ENGINE_PLUGIN_H */
