// Plain replay driver: runs a fuzz target on files, with no fuzzing engine,
// so seeds and regressions run in ctest under any compiler.
//
// Usage: TARGET_replay [--strict] [--allow-empty] PATH...
//   PATH          a file, or a folder whose regular files are run in name order
//   --strict      a rejected input fails the run (seeds must stay accepted)
//   --allow-empty no input at all is not an error (an empty regressions folder)
// A failing check aborts inside the target, as it does under libFuzzer.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_target.h"

namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::vector<uint8_t>& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  using kvcheck::fuzz::kTarget;
  bool strict = false, allow_empty = false;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--strict") {
      strict = true;
    } else if (arg == "--allow-empty") {
      allow_empty = true;
    } else if (arg.starts_with("-")) {
      std::fprintf(stderr, "usage: %s [--strict] [--allow-empty] PATH...\n", argv[0]);
      return 2;
    } else if (fs::is_directory(arg)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(arg)) {
        // Dotfiles (.gitkeep) are not inputs.
        if (entry.is_regular_file() && !entry.path().filename().string().starts_with(".")) {
          files.push_back(entry.path());
        }
      }
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (fs::is_regular_file(arg)) {
      inputs.emplace_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or folder: %s\n", argv[0], argv[i]);
      return 2;
    }
  }
  if (inputs.empty() && !allow_empty) {
    std::fprintf(stderr, "%s: no inputs to replay\n", argv[0]);
    return 2;
  }

  kvcheck::fuzz::initialize();
  int accepted = 0;
  std::vector<std::string> rejected;
  std::vector<uint8_t> bytes;
  for (const fs::path& path : inputs) {
    if (!read_file(path, bytes)) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], path.c_str());
      return 2;
    }
    if (kvcheck::fuzz::run_one(bytes) == kvcheck::fuzz::Outcome::kAccepted) {
      ++accepted;
    } else {
      rejected.push_back(path.string());
    }
  }
  // Every rejection fails a strict run, so name them all; otherwise a few.
  const size_t named = strict ? rejected.size() : std::min<size_t>(rejected.size(), 5);
  for (size_t i = 0; i < named; ++i) {
    std::fprintf(stderr, "%s: %s rejected %s\n", argv[0],
                 strict ? "error:" : "note:", rejected[i].c_str());
  }
  std::printf("%.*s replay: %zu inputs, %d accepted, %zu rejected%s\n", int(kTarget.name.size()),
              kTarget.name.data(), inputs.size(), accepted, rejected.size(),
              strict ? " (strict)" : "");
  return strict && !rejected.empty() ? 1 : 0;
}
