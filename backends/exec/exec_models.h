// The scratch folders the exec backend hands to its child, each with
// model.safetensors (Hugging Face names) and config.json. Written without
// fsync (scratch, not results), into at most kMaxFolders slots per owner
// under $TMPDIR (or TMP, TEMP, TEMPDIR) where set, else /dev/shm where
// writable, else /tmp; all removed when the owner goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck {

// A model in a slot. A slot's path is reused for other models, so `key`,
// not `path`, names the content (the config and a hash of the weights).
struct ModelFolder {
  std::string key;
  std::string path;
};

class ModelFolders {
 public:
  // More than the models a child can have been sent and not yet read: each
  // new model is a load and a create, and a ChildProcess has at most 64
  // requests unanswered, so a slot is reused only after the child's reply to
  // the load that read it.
  static constexpr size_t kMaxFolders = 64;

  ModelFolders() = default;
  ModelFolders(const ModelFolders&) = delete;
  ModelFolders& operator=(const ModelFolders&) = delete;
  ~ModelFolders();

  // The folder holding this model, written on first use into a free slot or
  // over the least recently used one. Throws InputError when the scratch
  // folder cannot be written.
  ModelFolder folder(const Config& config, const Weights& weights);

 private:
  struct Slot {
    bool filled = false;  // false while being written, or after a failed write
    uint64_t hash = 0;
    uint64_t last_use = 0;
    // Kept open: rewriting a slot is then a write and a truncate per file.
    int model_fd = -1, config_fd = -1;
    size_t model_size = 0, config_size = 0;  // the files' lengths (SIZE_MAX: unknown)
  };
  const std::filesystem::path& root();

  std::mutex mutex_;
  std::filesystem::path root_;  // SCRATCH/kvcheck-exec-PID-N (scratch_parent), made on first use
  std::vector<Slot> slots_;     // [slot] the model each slot folder holds
  uint64_t uses_ = 0;
};

}  // namespace kvcheck
