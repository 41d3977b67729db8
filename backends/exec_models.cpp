#include "backends/exec_models.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <list>
#include <mutex>

#include "model/config_json.h"
#include "model/rng.h"
#include "model/safetensors.h"
#include "model/status.h"

namespace kvcheck {

namespace {

constexpr size_t kMaxFolders = 64;

// 8 bytes per multiply: at the generators' sizes the weights are hashed for
// every engine, and byte-wise FNV cost as much as the in-process case itself.
uint64_t hash_words(uint64_t h, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = std::rotl(h ^ w, 29) * 0x9E3779B97F4A7C15ull;
  }
  for (; i < size; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h ^ (h >> 32);
}

class ScratchFolders {
 public:
  ~ScratchFolders() {
    std::error_code ignored;
    if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
  }

  std::string folder(const Config& config, const Weights& weights) {
    const std::string config_text = config_to_json(config).dump();
    uint64_t h = fnv1a64(config_text);
    for (const TensorView& t : tensor_views(config, weights))
      h = hash_words(h, t.data->data(), t.data->size() * sizeof(float));
    char name[17];
    std::snprintf(name, sizeof name, "%016llx", (unsigned long long)h);
    std::lock_guard lock(mutex_);
    const std::filesystem::path dir = root() / name;
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
      if (*it != dir) continue;
      recent_.splice(recent_.end(), recent_, it);  // most recently used last
      return dir.string();
    }
    // A new model: a new folder while there are fewer than kMaxFolders, else
    // the least recently used one renamed and its files overwritten (one
    // rename instead of a remove_all and a mkdir: directory operations were
    // most of the protocol's cost per case). The child has read a folder by
    // the time its load replies, so reusing it later changes nothing it holds.
    if (recent_.size() < kMaxFolders) {
      std::filesystem::create_directories(dir);
    } else {
      std::filesystem::rename(recent_.front(), dir);
      recent_.pop_front();
    }
    write_file(dir / "model.safetensors", save_safetensors(config, weights));
    write_file(dir / "config.json", {config_text.begin(), config_text.end()});
    recent_.push_back(dir);
    return dir.string();
  }

 private:
  const std::filesystem::path& root() {
    if (root_.empty()) {
      root_ =
          std::filesystem::temp_directory_path() / ("kvcheck-exec-" + std::to_string(::getpid()));
      std::filesystem::create_directories(root_);
    }
    return root_;
  }

  // In place, without fsync: scratch, not results. Overwritten, then cut to
  // size, never truncated to 0 first: ext4 writes a file truncated to 0 and
  // rewritten back to disk when it is closed (auto_da_alloc), and a new file
  // instead costs an inode search (recently_deleted); either was most of an
  // exec case's CPU in perf.
  static void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    for (size_t done = 0; ok && done < bytes.size();) {
      const ssize_t put = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (put < 0 && errno == EINTR) continue;
      ok = put > 0;
      if (ok) done += size_t(put);
    }
    ok = ok && ::ftruncate(fd, off_t(bytes.size())) == 0;
    if (fd >= 0) ok = ::close(fd) == 0 && ok;
    if (!ok)
      throw InputError("exec backend: cannot write " + path.string() + ": " + std::strerror(errno));
  }

  std::mutex mutex_;
  std::filesystem::path root_;
  std::list<std::filesystem::path> recent_;  // [folder], least recently used first
};

}  // namespace

std::string exec_model_folder(const Config& config, const Weights& weights) {
  static ScratchFolders folders;
  return folders.folder(config, weights);
}

}  // namespace kvcheck
