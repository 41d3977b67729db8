#include "properties/repro/failure_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "properties/runner.h"

namespace kvcheck {

namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

bool file_holds(const std::string& path, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream content;
  content << in.rdbuf();
  return content.str() == text;
}

// Writes and flushes a file that must not exist yet.
std::string write_exclusive(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return path + ": cannot create: " + errno_text(errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string error = path + ": write failed: " + errno_text(errno);
      ::close(fd);
      ::unlink(path.c_str());
      return error;
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string error = path + ": flush failed: " + errno_text(errno);
    ::unlink(path.c_str());
    return error;
  }
  return {};
}

}  // namespace

std::string default_failures_dir() {
  const char* env = std::getenv("KVCHECK_FAILURES");
  return env != nullptr && *env != '\0' ? env : "kvcheck-failures";
}

std::string case_file_stem(Property property, FaultSet faults, const Scenario& scenario) {
  char digest[16];
  std::snprintf(digest, sizeof(digest), "%08llx",
                static_cast<unsigned long long>(scenario_digest(scenario) & 0xffffffffull));
  std::string fault = faults.any() ? faults.to_string() : "nofault";
  for (char& c : fault) {
    if (c == ',') c = '+';
  }
  return std::string(property_label(property)) + "-" + std::string(property_name(property)) + "-" +
         fault + "-" + digest;
}

Result<std::string> write_new_file(const std::string& dir, const std::string& stem,
                                   const std::string& suffix, const std::string& text,
                                   bool* already) {
  if (already != nullptr) *already = false;
  std::error_code ec;
  std::filesystem::create_directories(dir.empty() ? "." : dir, ec);
  if (ec) return Result<std::string>::failure(dir + ": cannot create the folder: " + ec.message());
  const std::string base = dir.empty() ? std::string() : dir + "/";
  // A name no other writer uses, in the same folder so that link() is atomic.
  static std::atomic<unsigned> counter{0};
  const std::string temporary =
      base + "." + stem + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  if (std::string error = write_exclusive(temporary, text); !error.empty()) {
    return Result<std::string>::failure(error);
  }
  constexpr int kMaxTries = 1000;
  for (int attempt = 1; attempt <= kMaxTries; ++attempt) {
    const std::string path =
        base + stem + (attempt == 1 ? "" : "-" + std::to_string(attempt)) + suffix;
    if (::link(temporary.c_str(), path.c_str()) == 0) {
      ::unlink(temporary.c_str());
      return path;
    }
    const int error = errno;
    if (error == EEXIST) {
      if (file_holds(path, text)) {
        ::unlink(temporary.c_str());
        if (already != nullptr) *already = true;
        return path;
      }
      continue;
    }
    // Filesystems without hard links: a rename after checking the name is
    // free; a racing writer could still take the name in between.
    if (error == EPERM || error == ENOTSUP || error == EXDEV || error == EMLINK) {
      if (std::filesystem::exists(path, ec)) continue;
      if (std::rename(temporary.c_str(), path.c_str()) == 0) return path;
    }
    ::unlink(temporary.c_str());
    return Result<std::string>::failure(path + ": cannot write: " + errno_text(error));
  }
  ::unlink(temporary.c_str());
  return Result<std::string>::failure(base + stem + suffix + ": " + std::to_string(kMaxTries) +
                                      " different files already hold this name");
}

CaseFile failure_case(const Scenario& scenario, const Verdict& verdict, FaultSet faults,
                      const FailureContext& context) {
  CaseFile c;
  c.scenario = scenario;
  c.property = verdict.property;
  c.faults = faults;
  c.backend = one_line(context.backend);
  c.reference = one_line(context.reference);
  c.engine = one_line(context.engine);
  if (scenario.model) {
    c.model_path = one_line(scenario.model->path);
    c.model_hash = scenario.model->hash;
  }
  if (!context.found_by.empty()) c.notes.push_back(one_line("found by " + context.found_by));
  if (!context.reproduce.empty()) {
    c.notes.push_back(one_line("reproduce: " + context.reproduce));
  }
  for (const std::string& note : context.notes) c.notes.push_back(one_line(note));
  c.prelude = context.prelude;
  c.has_verdict = true;
  c.verdict = record_verdict(verdict);
  return c;
}

WrittenCase write_failure_case(const Scenario& scenario, const Verdict& verdict, FaultSet faults,
                               const FailureContext& context) {
  WrittenCase written;
  try {
    const std::string dir =
        context.failures_dir.empty() ? default_failures_dir() : context.failures_dir;
    const CaseFile c = failure_case(scenario, verdict, faults, context);
    bool already = false;
    const Result<std::string> path = write_new_file(
        dir, case_file_stem(verdict.property, faults, scenario), ".case", print_case(c), &already);
    std::ostringstream report;
    if (!path) {
      written.error = path.error();
      report << "could not write the case file: " << written.error << "\n";
    } else {
      written.ok = true;
      written.path = path.value();
      written.already_recorded = already;
      report << (already ? "case file (already recorded): " : "case file: ") << written.path
             << "\n";
      // A case file never makes kvcheck load code: a plugin or a command
      // runs only when the user names it with --backend, so say how.
      const std::string backend = case_command_options(c);
      report << "replay:    " << context.kvcheck_command << " replay" << backend << " "
             << written.path << "\n";
      report << "shrink:    " << context.kvcheck_command << " shrink" << backend << " "
             << written.path << "\n";
    }
    if (!context.reproduce.empty()) report << "reproduce: " << context.reproduce << "\n";
    written.report = report.str();
  } catch (const std::exception& e) {
    written.ok = false;
    written.error = e.what();
    written.report = std::string("could not write the case file: ") + e.what() + "\n";
  }
  return written;
}

}  // namespace kvcheck
