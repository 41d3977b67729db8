#include "backends/exec_models.h"

#include <unistd.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "model/config_json.h"
#include "model/rng.h"
#include "model/safetensors.h"
#include "model/status.h"

namespace kvcheck {

namespace {

constexpr size_t kMaxFolders = 64;

class ScratchFolders {
 public:
  ~ScratchFolders() {
    std::error_code ignored;
    if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
  }

  std::string folder(const Config& config, const Weights& weights) {
    const std::string config_text = config_to_json(config).dump();
    uint64_t h = fnv1a64(config_text);
    for (const TensorView& t : tensor_views(config, weights)) {
      const auto* bytes = reinterpret_cast<const char*>(t.data->data());
      h = h * 0x9E3779B97F4A7C15ull ^ fnv1a64({bytes, t.data->size() * sizeof(float)});
    }
    char name[17];
    std::snprintf(name, sizeof name, "%016llx", (unsigned long long)h);
    std::lock_guard lock(mutex_);
    const std::filesystem::path dir = root() / name;
    if (std::filesystem::exists(dir / "config.json")) return dir.string();
    write(dir, config_text, save_safetensors(config, weights));
    recent_.push_back(dir);
    if (recent_.size() > kMaxFolders) {
      std::error_code ignored;
      std::filesystem::remove_all(recent_.front(), ignored);
      recent_.pop_front();
    }
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

  // config.json last: its presence marks a complete folder.
  static void write(const std::filesystem::path& dir, const std::string& config_text,
                    const std::vector<uint8_t>& safetensors) {
    std::filesystem::create_directories(dir);
    write_file(dir / "model.safetensors", safetensors.data(), safetensors.size());
    write_file(dir / "config.json", config_text.data(), config_text.size());
  }

  static void write_file(const std::filesystem::path& path, const void* data, size_t size) {
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(static_cast<const char*>(data), std::streamsize(size));
      if (!out) throw InputError("exec backend: cannot write " + tmp.string());
    }
    std::filesystem::rename(tmp, path);
  }

  std::mutex mutex_;
  std::filesystem::path root_;
  std::deque<std::filesystem::path> recent_;  // [folder], oldest first
};

}  // namespace

std::string exec_model_folder(const Config& config, const Weights& weights) {
  static ScratchFolders folders;
  return folders.folder(config, weights);
}

}  // namespace kvcheck
