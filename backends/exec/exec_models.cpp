#include "backends/exec/exec_models.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "model/config_json.h"
#include "model/rng.h"
#include "model/safetensors.h"
#include "model/status.h"

namespace kvcheck {

namespace {

// 32 bytes per round, in four independent lanes: at the generators' sizes
// the weights are hashed for every engine (byte-wise FNV cost as much as the
// in-process case itself, and one lane waits on its multiply's latency).
uint64_t hash_words(uint64_t h, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t lane[4] = {h, h ^ 0x9E3779B97F4A7C15ull, h ^ 0xC2B2AE3D27D4EB4Full,
                      h ^ 0x165667B19E3779F9ull};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = std::rotl(lane[k] ^ w, 29) * 0x9E3779B97F4A7C15ull;
    }
  }
  h = (lane[0] ^ std::rotl(lane[1], 17) ^ std::rotl(lane[2], 31) ^ std::rotl(lane[3], 47)) *
      0x9E3779B97F4A7C15ull;
  for (; i < size; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h ^ (h >> 32) ^ size;
}

int open_for_writing(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw InputError("exec backend: cannot write " + path.string() + ": " + std::strerror(errno));
  return fd;
}

// In place, without fsync: scratch, not results. Overwritten, then cut to
// size where the file was longer (`size`: its length, updated), never
// truncated to 0 first: ext4 writes a file truncated to 0 and rewritten back
// to disk when it is closed (auto_da_alloc), and a new file instead costs an
// inode search (recently_deleted); either was most of an exec case's CPU in
// perf. A system call is dear on a paravirtualized guest: none is spent on a
// cut that would change nothing.
void write_file(int fd, const std::filesystem::path& path, std::span<const uint8_t> bytes,
                size_t& size) {
  bool ok = true;
  for (size_t done = 0; ok && done < bytes.size();) {
    const ssize_t put = ::pwrite(fd, bytes.data() + done, bytes.size() - done, off_t(done));
    if (put < 0 && errno == EINTR) continue;
    ok = put > 0;
    if (ok) done += size_t(put);
  }
  if (ok && size > bytes.size()) ok = ::ftruncate(fd, off_t(bytes.size())) == 0;
  if (!ok) {
    size = SIZE_MAX;  // unknown: the next write cuts
    throw InputError("exec backend: cannot write " + path.string() + ": " + std::strerror(errno));
  }
  size = bytes.size();
}

// Where the slots go: the temporary folder the user named, else /dev/shm
// where it is a writable folder, else the system's. A case's model crosses
// through a slot, and on tmpfs creating and rewriting a file touches memory
// only; on the ext4 /tmp of the machines measured, creating the 64 slots
// cost about 0.3 ms each (an inode search), which a short run pays in full.
std::filesystem::path scratch_parent() {
  for (const char* variable : {"TMPDIR", "TMP", "TEMP", "TEMPDIR"})
    if (const char* value = std::getenv(variable); value != nullptr && *value != '\0')
      return std::filesystem::temp_directory_path();
  std::error_code error;
  if (std::filesystem::is_directory("/dev/shm", error) && ::access("/dev/shm", W_OK | X_OK) == 0)
    return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

}  // namespace

ModelFolders::~ModelFolders() {
  for (const Slot& slot : slots_) {
    if (slot.model_fd >= 0) ::close(slot.model_fd);
    if (slot.config_fd >= 0) ::close(slot.config_fd);
  }
  std::error_code ignored;
  if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
}

const std::filesystem::path& ModelFolders::root() {
  static std::atomic<int> owners{0};
  if (root_.empty()) {
    root_ = scratch_parent() /
            ("kvcheck-exec-" + std::to_string(::getpid()) + "-" + std::to_string(owners++));
    std::filesystem::create_directories(root_);
  }
  return root_;
}

ModelFolder ModelFolders::folder(const Config& config, const Weights& weights) {
  const std::string config_text = config_to_json(config).dump();
  uint64_t hash = fnv1a64(config_text);
  for_each_tensor(config, weights,
                  [&](std::string_view, std::span<const int64_t>, const std::vector<float>& data) {
                    hash = hash_words(hash, data.data(), data.size() * sizeof(float));
                  });
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", (unsigned long long)hash);

  std::lock_guard lock(mutex_);
  const auto path_of = [&](size_t slot) { return root() / std::to_string(slot); };
  size_t slot = 0;
  for (; slot < slots_.size(); ++slot) {
    if (!slots_[slot].filled || slots_[slot].hash != hash) continue;
    slots_[slot].last_use = ++uses_;
    return {key, path_of(slot).string()};
  }
  // A new model: a new slot while there are fewer than kMaxFolders, else the
  // least recently used one, its files overwritten in place (directory
  // operations were most of the protocol's cost per case).
  if (slots_.size() < kMaxFolders) {
    slot = slots_.size();
    const std::filesystem::path dir = path_of(slot);
    std::filesystem::create_directories(dir);
    Slot fresh;
    fresh.model_fd = open_for_writing(dir / "model.safetensors");
    try {
      fresh.config_fd = open_for_writing(dir / "config.json");
    } catch (...) {
      ::close(fresh.model_fd);
      throw;
    }
    slots_.push_back(fresh);
  } else {
    slot = 0;
    for (size_t k = 1; k < slots_.size(); ++k)
      if (slots_[k].last_use < slots_[slot].last_use) slot = k;
  }
  const std::filesystem::path dir = path_of(slot);
  Slot& chosen = slots_[slot];
  chosen.filled = false;
  write_file(chosen.model_fd, dir / "model.safetensors", save_safetensors(config, weights),
             chosen.model_size);
  write_file(chosen.config_fd, dir / "config.json",
             {reinterpret_cast<const uint8_t*>(config_text.data()), config_text.size()},
             chosen.config_size);
  chosen.filled = true;
  chosen.hash = hash;
  chosen.last_use = ++uses_;
  return {key, dir.string()};
}

}  // namespace kvcheck
