#include "properties/rc/hunt_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/child_process_io.h"
#include "properties/repro/case_file.h"

namespace kvcheck::rcgen {

Verdict HuntSpec::check(const Scenario& scenario) const {
  return property ? check_property(*property, scenario, *subject) : check_all(scenario, *subject);
}

namespace {

using Clock = std::chrono::steady_clock;

// A frame on a worker's pipes: a type byte, the payload's length (4 bytes,
// little endian), the payload.
constexpr char kJob = 'J';         // caller -> worker: a job's text
constexpr char kEvaluation = 'E';  // worker -> caller: passed, shrinking, description
constexpr char kResult = 'R';      // worker -> caller: the hunt's result as JSON
constexpr size_t kMaxFrame = size_t{64} << 20;

bool write_frame(int fd, char type, const std::string& payload) {
  std::string frame(5, '\0');
  frame[0] = type;
  const auto n = uint32_t(payload.size());
  for (int i = 0; i < 4; ++i) frame[size_t(1 + i)] = char((n >> (8 * i)) & 0xffu);
  frame += payload;
  return write_all(fd, frame.data(), frame.size());
}

}  // namespace

// Frames from one pipe, read through a buffer: one read takes many frames.
// Not file-local: WorkerProcess (hunt_worker.h's pimpl) holds one.
class FrameReader {
 public:
  enum class Status { kFrame, kClosed, kTimedOut, kStopped };
  explicit FrameReader(int fd) : fd_(fd) {}

  // Waits up to `timeout` seconds (< 0: forever) for a whole frame, polling
  // `stop` (may be empty) ten times a second.
  Status next(double timeout, const std::function<bool()>& stop, char& type, std::string& payload) {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(std::max(timeout, 0.0)));
    for (;;) {
      if (take(type, payload)) return Status::kFrame;
      if (stop && stop()) return Status::kStopped;
      int wait_ms = stop ? 100 : -1;
      if (timeout >= 0) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        if (left <= 0) return Status::kTimedOut;
        wait_ms = wait_ms < 0 ? int(left) : std::min<int>(wait_ms, int(left));
      }
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, wait_ms);
      if (ready < 0 && errno != EINTR) return Status::kClosed;
      if (ready <= 0) continue;
      char chunk[65536];
      const ssize_t got = ::read(fd_, chunk, sizeof chunk);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) return Status::kClosed;
      buffer_.append(chunk, size_t(got));
    }
  }

 private:
  bool take(char& type, std::string& payload) {
    if (buffer_.size() - at_ < 5) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t(uint8_t(buffer_[at_ + size_t(1 + i)])) << (8 * i);
    if (n > kMaxFrame)
      throw std::runtime_error("hunt worker: a frame of " + std::to_string(n) + " bytes");
    if (buffer_.size() - at_ < 5 + size_t(n)) return false;
    type = buffer_[at_];
    payload.assign(buffer_, at_ + 5, n);
    at_ += 5 + size_t(n);
    if (at_ == buffer_.size()) buffer_.clear(), at_ = 0;
    return true;
  }

  int fd_;
  std::string buffer_;
  size_t at_ = 0;  // first unread byte of buffer_
};

namespace {

nlohmann::json verdict_json(const Verdict& v) {
  const Location& w = v.where;
  return {{"property", int(v.property)},
          {"passed", v.passed},
          {"applicable", v.applicable},
          {"worst_ratio", exact_text(v.worst_ratio)},
          {"where",
           {w.call, w.sequence, w.position, w.layer, w.kv_head, w.first_bad_position,
            w.last_bad_position}},
          {"summary", v.summary},
          {"detail", v.detail},
          {"trace", v.trace}};
}

Verdict verdict_from(const nlohmann::json& j) {
  Verdict v;
  v.property = Property(j.at("property").get<int>());
  v.passed = j.at("passed");
  v.applicable = j.at("applicable");
  v.worst_ratio = std::strtod(j.at("worst_ratio").get<std::string>().c_str(), nullptr);
  const auto& w = j.at("where");
  v.where = {w.at(0), w.at(1), w.at(2), w.at(3), w.at(4), w.at(5), w.at(6)};
  v.summary = j.at("summary");
  v.detail = j.at("detail");
  v.trace = j.at("trace");
  return v;
}

// The counterexample travels as a case file's text: the one format that
// round-trips a scenario (docs/CASE_FORMAT.md).
nlohmann::json result_json(const HuntResult& r) {
  nlohmann::json j = {{"failed", r.failed},
                      {"cases_run", r.cases_run},
                      {"failing_evaluations", r.failing_evaluations},
                      {"evaluations", r.evaluations},
                      {"seconds", r.seconds},
                      {"verdict", verdict_json(r.verdict)},
                      {"rapidcheck_message", r.rapidcheck_message},
                      {"shrink_steps", r.shrink_steps},
                      {"shrinks_skipped", r.shrinks_skipped},
                      {"cut", r.cut}};
  if (r.counterexample) {
    CaseFile c;
    c.scenario = *r.counterexample;
    c.property = r.verdict.property;
    j["counterexample"] = print_case(c);
  }
  return j;
}

HuntResult result_from(const std::string& text, const HuntSpec& spec) {
  const nlohmann::json j = nlohmann::json::parse(text);
  HuntResult r;
  r.failed = j.at("failed");
  r.cases_run = j.at("cases_run");
  r.failing_evaluations = j.at("failing_evaluations");
  r.evaluations = j.at("evaluations");
  r.seconds = j.at("seconds");
  r.verdict = verdict_from(j.at("verdict"));
  r.rapidcheck_message = j.at("rapidcheck_message");
  r.shrink_steps = j.at("shrink_steps");
  r.shrinks_skipped = j.at("shrinks_skipped");
  r.cut = j.at("cut");
  if (j.contains("counterexample")) {
    const Result<CaseFile> c = parse_case(j.at("counterexample").get<std::string>());
    if (!c)
      throw std::runtime_error("hunt worker: the counterexample does not parse: " + c.error());
    r.counterexample = c.value().scenario;
    r.counterexample->model = spec.options.model;
  }
  return r;
}

// An evaluation frame: passed and shrinking as '0'/'1', then the description.
std::string evaluation_frame(const Verdict& v, bool shrinking, const std::string& description) {
  return std::string(1, v.passed ? '1' : '0') + (shrinking ? '1' : '0') + description;
}

// The wrapper of a hunt's check that describes each evaluation to `emit`,
// and knows whether it is a shrink step (after the hunt's first failure).
struct Evaluations {
  const HuntSpec& spec;
  std::function<void(const Verdict&, bool shrinking, const std::string& description)> emit;
  bool failed = false;

  Verdict operator()(const Scenario& s) {
    const bool shrinking = failed;
    Verdict v = spec.check(s);
    failed = failed || !v.passed;
    emit(v, shrinking, spec.describe ? spec.describe(s, v) : std::string());
    return v;
  }
};

[[noreturn]] void serve(int jobs, int out, const HuntWorker::SpecFor& spec_for) {
  FrameReader reader(jobs);
  for (;;) {
    char type = 0;
    std::string job;
    if (reader.next(-1, {}, type, job) != FrameReader::Status::kFrame || type != kJob) _exit(0);
    const HuntSpec spec = spec_for(job);
    Evaluations evaluations{spec, [&](const Verdict& v, bool shrinking, const std::string& d) {
                              if (!write_frame(out, kEvaluation, evaluation_frame(v, shrinking, d)))
                                _exit(0);  // the caller is gone
                            }};
    const HuntResult r = hunt(std::ref(evaluations), spec.emphasis, spec.options);
    if (!write_frame(out, kResult, result_json(r).dump())) _exit(0);
  }
}

// What a forked process does first: the caller's handlers (an interrupt
// flag) are not its own, and it ends with the caller.
void become_child() {
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

}  // namespace

// One forked process and its two pipes.
class WorkerProcess {
 public:
  // Forks; the child runs `body(in, out)` and exits.
  explicit WorkerProcess(const std::function<void(int in, int out)>& body) {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("hunt worker: pipe: ") + std::strerror(errno));
    }
    // Output buffered now would be written twice, once by each process.
    std::fflush(stdout), std::fflush(stderr);
    pid_ = fork();
    if (pid_ < 0)
      throw std::runtime_error(std::string("hunt worker: fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      become_child();
      ::close(to_child[1]), ::close(from_child[0]);
      body(to_child[0], from_child[1]);
      _exit(0);
    }
    ::close(to_child[0]), ::close(from_child[1]);
    to_child_ = to_child[1], from_child_ = from_child[0];
    reader_ = std::make_unique<FrameReader>(from_child_);
  }
  ~WorkerProcess() { kill_and_reap(); }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  bool send(char type, const std::string& payload) { return write_frame(to_child_, type, payload); }
  FrameReader& reader() { return *reader_; }

  // How it ended: killed first when `kill_it` or when it does not exit
  // within a second of closing its pipe.
  std::string end(bool kill_it) {
    if (pid_ <= 0) return ended_;
    int status = 0;
    bool gone = false;
    for (int i = 0; i < 200 && !kill_it && !gone; ++i) {
      gone = waitpid(pid_, &status, WNOHANG) == pid_;
      if (!gone) usleep(5000);
    }
    if (!gone) {
      kill(pid_, SIGKILL);
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    pid_ = -1;
    ::close(to_child_), ::close(from_child_);
    return ended_ = describe_exit(status);
  }
  void kill_and_reap() { end(true); }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::unique_ptr<FrameReader> reader_;
  std::string ended_;
};

namespace {

std::string timeout_text(double seconds) {
  char text[96];
  std::snprintf(text, sizeof text, "did not finish the case within %g s (a hang; killed)", seconds);
  return text;
}

// Waits for the frame a process owes; empty `death` when it came.
std::string await(WorkerProcess& process, const WorkerOptions& options, char& type,
                  std::string& payload, bool& stopped) {
  const FrameReader::Status status =
      process.reader().next(options.case_timeout_seconds, options.stop, type, payload);
  stopped = status == FrameReader::Status::kStopped;
  if (status == FrameReader::Status::kFrame || stopped) return "";
  if (status == FrameReader::Status::kTimedOut) {
    process.kill_and_reap();
    return timeout_text(options.case_timeout_seconds);
  }
  return process.end(false);
}

Verdict crash_verdict(Property property, const std::string& death) {
  Verdict v;
  v.property = property;
  v.passed = false;
  v.summary = std::string(property_label(property)) + " " + std::string(property_name(property)) +
              ": the engine crashed: the process that ran it " + death;
  v.detail =
      "The check ran in a process of its own (a hunt worker, docs/REPORTS.md), so the "
      "crash ended that process, not the run. The engine's state is lost with it: the "
      "case is the verdict.\n";
  return v;
}

// `evaluate` in a fresh process, with its description.
struct Alone {
  Verdict verdict;
  std::string description;
  std::string death;  // empty: it answered
  bool stopped = false;
};

Alone run_alone(const std::function<Verdict()>& evaluate,
                const std::function<std::string(const Verdict&)>& describe,
                const WorkerOptions& options) {
  WorkerProcess process([&](int, int out) {
    const Verdict v = evaluate();
    const std::string d = describe ? describe(v) : std::string();
    write_frame(out, kEvaluation, verdict_json(v).dump() + '\n' + d);
  });
  Alone a;
  char type = 0;
  std::string payload;
  a.death = await(process, options, type, payload, a.stopped);
  if (!a.death.empty() || a.stopped) return a;
  const size_t split = payload.find('\n');
  a.verdict = verdict_from(nlohmann::json::parse(payload.substr(0, split)));
  a.description = split == std::string::npos ? "" : payload.substr(split + 1);
  return a;
}

// The spec's check in a fresh process; a crash is charged to the spec's
// property, or to the first of check_all's that fails or crashes alone.
Alone evaluate_alone(const HuntSpec& spec, const Scenario& s, const WorkerOptions& options) {
  const auto describe = [&](const Verdict& v) { return spec.describe ? spec.describe(s, v) : ""; };
  Alone a = run_alone([&] { return spec.check(s); }, describe, options);
  if (a.death.empty() || a.stopped) return a;
  Property charged = spec.property.value_or(check_all_order().front());
  if (!spec.property) {
    for (const Property p : check_all_order()) {
      const Alone one = run_alone([&] { return check_property(p, s, *spec.subject); }, {}, options);
      if (one.stopped) return one;
      if (!one.death.empty() || !one.verdict.passed) {
        charged = p;
        if (one.death.empty()) a.death = "failed where check_all crashed: " + one.verdict.summary;
        break;
      }
    }
  }
  a.verdict = crash_verdict(charged, a.death);
  if (spec.describe) a.description = spec.describe(s, a.verdict);
  return a;
}

HuntResult cut_result() {
  HuntResult r;
  r.cut = true;
  return r;
}

// The spec's own stop, and the worker's (an interrupt).
void add_stop(HuntSpec& spec, const std::function<bool()>& stop) {
  if (!stop) return;
  const std::function<bool()> own = spec.options.stop;
  spec.options.stop = [stop, own] { return stop() || (own && own()); };
}

}  // namespace

HuntWorker::HuntWorker(SpecFor spec_for, WorkerOptions options)
    : spec_for_(std::move(spec_for)), options_(std::move(options)) {}

HuntWorker::~HuntWorker() = default;

HuntResult HuntWorker::run(const std::string& job, const EvaluationListener& listener) {
  if (options_.isolate) return run_in_worker(job, listener);
  HuntSpec spec = spec_for_(job);
  add_stop(spec, options_.stop);
  Evaluations evaluations{spec, [&](const Verdict&, bool shrinking, const std::string& d) {
                            if (listener) listener(d, shrinking);
                          }};
  return hunt(std::ref(evaluations), spec.emphasis, spec.options);
}

HuntResult HuntWorker::run_in_worker(const std::string& job, const EvaluationListener& listener) {
  for (int attempt = 0;; ++attempt) {
    if (!process_) {
      process_ =
          std::make_unique<WorkerProcess>([this](int in, int out) { serve(in, out, spec_for_); });
    }
    if (process_->send(kJob, job)) break;
    process_.reset();  // it died between jobs: a fresh one takes the job
    if (attempt == 1) throw std::runtime_error("hunt worker: a fresh worker takes no job");
  }
  std::vector<bool> passed;  // [evaluation] as the worker reported it
  for (;;) {
    char type = 0;
    std::string payload;
    bool stopped = false;
    const std::string death = await(*process_, options_, type, payload, stopped);
    if (stopped) {
      process_.reset();
      return cut_result();
    }
    if (death.empty() && type == kEvaluation && payload.size() >= 2) {
      passed.push_back(payload[0] == '1');
      if (listener) listener(payload.substr(2), payload[1] == '1');
      continue;
    }
    if (death.empty() && type == kResult) return result_from(payload, spec_for_(job));
    process_.reset();
    ++deaths_;
    if (options_.stop && options_.stop()) return cut_result();  // the interrupt killed it
    return recover(job, passed, death.empty() ? "sent an unknown frame" : death, listener);
  }
}

HuntResult HuntWorker::recover(const std::string& job, const std::vector<bool>& passed_before,
                               const std::string& death, const EvaluationListener& listener) {
  HuntSpec spec = spec_for_(job);
  add_stop(spec, options_.stop);
  const int known = int(passed_before.size());
  // The worker's evaluations replay from what it said; the one that killed
  // it and every later one run in a fresh process each.
  spec.options.evaluations_before_cut = known + 1;
  int index = 0;
  bool failed = false;
  const auto check = [&](const Scenario& s) {
    const int i = index++;
    if (i < known) {
      Verdict v;
      v.property = spec.property.value_or(check_all_order().front());
      v.passed = passed_before[size_t(i)];
      v.summary = v.passed ? "" : "failed in the worker";
      failed = failed || !v.passed;
      return v;
    }
    const bool shrinking = failed;
    const Alone a = evaluate_alone(spec, s, options_);
    if (a.stopped) return Verdict{};  // passes: the interrupt ends the hunt
    failed = failed || !a.verdict.passed;
    if (listener) listener(a.description, shrinking);
    return a.verdict;
  };
  HuntResult r = hunt(check, spec.emphasis, spec.options);
  if (!r.failed && !r.cut) {
    // Nothing fails alone: the crash needed the cases the worker ran first.
    r.failed = true;
    r.verdict = crash_verdict(spec.property.value_or(check_all_order().front()), death);
    r.verdict.summary += " after " + std::to_string(known) +
                         " evaluations, but no case fails alone in a fresh process: state "
                         "leaks from one case to the next inside the engine's process";
  }
  return r;
}

Verdict check_in_fresh_process(const HuntSpec& spec, const Scenario& scenario,
                               const WorkerOptions& options) {
  return evaluate_alone(spec, scenario, options).verdict;
}

}  // namespace kvcheck::rcgen
