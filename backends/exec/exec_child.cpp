#include "backends/exec/exec_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>
#include <utility>

#include "backends/exec/exec_wire.h"
#include "model/child_process_io.h"

extern char** environ;

namespace kvcheck {

namespace {

constexpr size_t kErrTailBytes = 8192;
constexpr int kErrTailLines = 20;
constexpr size_t kReadChunk = 65536;
// Posted request bytes at most before they are written and their replies
// read: half of Linux's default pipe buffer.
constexpr size_t kMaxUnsent = 32768;
// Replies left unread at most.
constexpr size_t kMaxPosted = 64;

// A child that dies while we write must not kill kvcheck with SIGPIPE; the
// write then fails with EPIPE and the death is reported as a result.
void ignore_sigpipe() {
  struct sigaction old {};
  sigaction(SIGPIPE, nullptr, &old);
  if (old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

std::vector<std::string> child_environment(char** base, const std::string& self) {
  constexpr std::string_view kName = "KVCHECK_EXPORT=";
  std::error_code error;
  const std::filesystem::path exporter =
      std::filesystem::path(self).parent_path() / "kvcheck-export";
  const bool beside = !self.empty() && std::filesystem::is_regular_file(exporter, error);
  std::vector<std::string> out;
  for (char** entry = base; entry != nullptr && *entry != nullptr; ++entry) {
    if (!beside || !std::string_view(*entry).starts_with(kName)) out.emplace_back(*entry);
  }
  if (beside) out.push_back(std::string(kName) + exporter.string());
  return out;
}

ChildProcess::ChildProcess(std::string command, ChildWaits waits)
    : command_(std::move(command)), timeout_(waits.timeout), spin_(waits.spin) {
  ignore_sigpipe();
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    throw ChildFault("exec " + command_ + ": pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  const std::string script = "exec " + command_;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  std::error_code no_self;
  const std::vector<std::string> env =
      child_environment(environ, std::filesystem::read_symlink("/proc/self/exe", no_self).string());
  std::vector<char*> envp;
  for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const int rc =
      posix_spawn(&pid_, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]), ::close(out[1]), ::close(err[1]);
  to_child_ = in[1], from_child_ = out[0], child_err_ = err[0];
  if (rc != 0) {
    pid_ = -1;
    throw ChildFault("exec " + command_ + ": cannot start /bin/sh: " + std::strerror(rc));
  }
  fcntl(to_child_, F_SETFL, fcntl(to_child_, F_GETFL) | O_NONBLOCK);
  fcntl(child_err_, F_SETFL, fcntl(child_err_, F_GETFL) | O_NONBLOCK);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    // Posted requests (a destroy, an unload) still go out, best effort: a
    // child may log or count them, and ends at end of file either way.
    if (!unsent_.empty()) (void)!::write(to_child_, unsent_.data(), unsent_.size());
    close_fd(to_child_);                         // end of file on stdin: a well-behaved child exits
    for (int i = 0; i < 500 && pid_ > 0; ++i) {  // up to 1 s to exit cleanly
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_)
        pid_ = -1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (pid_ > 0) reap(true);
  }
  close_fd(to_child_), close_fd(from_child_), close_fd(child_err_);
}

std::string ChildProcess::reap(bool kill_first) {
  if (pid_ <= 0) return "already gone";
  if (kill_first) kill(pid_, SIGKILL);
  int status = 0;
  // A child that closed stdout may still be exiting: give it a moment.
  for (int i = 0; !kill_first && i < 500; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (!kill_first && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      return "closed its stdout but did not exit (killed)";
  }
  if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
  return describe_exit(status);
}

void ChildProcess::drain_stderr() {
  char buf[4096];
  while (child_err_ >= 0) {
    const ssize_t got = ::read(child_err_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) close_fd(child_err_);
    if (got <= 0) break;
    err_tail_.append(buf, size_t(got));
    if (err_tail_.size() > 2 * kErrTailBytes) err_tail_.erase(0, err_tail_.size() - kErrTailBytes);
  }
}

std::string ChildProcess::stderr_tail() const {
  std::string tail = err_tail_.size() > kErrTailBytes
                         ? err_tail_.substr(err_tail_.size() - kErrTailBytes)
                         : err_tail_;
  size_t end = tail.size();
  if (end > 0 && tail[end - 1] == '\n') --end;
  size_t begin = end;
  for (int lines = 0; begin > 0; --begin) {
    if (tail[begin - 1] == '\n' && ++lines == kErrTailLines) break;
  }
  tail = tail.substr(begin);
  if (tail.empty()) return "; its stderr was empty";
  return "; the last lines of its stderr:\n" + tail;
}

void ChildProcess::fail(const std::string& call, const std::string& reason) {
  const bool exited = reason.empty();
  const std::string how = reap(!exited);
  // The child is gone; what it wrote to stderr before is read until end of
  // file, but for a bounded time: a process it started (`sh -c 'a; b'`) may
  // outlive it holding the pipe, which used to block kvcheck for good. Its
  // stdin closes first, so such a process reading it ends too.
  close_fd(to_child_);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (child_err_ >= 0 && std::chrono::steady_clock::now() < until) {
    pollfd fd{child_err_, POLLIN, 0};
    if (poll(&fd, 1, 50) > 0) drain_stderr();
  }
  close_fd(from_child_), close_fd(child_err_);
  death_ = call + ": " + (exited ? "the child " + how : reason + "; the child was killed");
  throw ChildFault("exec " + command_ + ": " + death_ + stderr_tail());
}

std::string ChildProcess::gone(const std::string& call) const {
  // A later call names how the child ended, so that whichever call a
  // property sees fail, the verdict says it was a crash (and which).
  return "exec " + command_ + ": " + call + ": the child is gone" +
         (death_.empty() ? "" : " (after " + death_ + ")");
}

bool ChildProcess::wait_ready(int fd, short events) {
  pollfd fds[2] = {{fd, events, 0}, {child_err_, POLLIN, 0}};
  const std::span<pollfd> polled(fds, child_err_ >= 0 ? 2 : 1);
  bool ready = wire::spin_until_ready(polled, spin_);
  for (;;) {
    if (ready) {
      if (child_err_ >= 0 && fds[1].revents != 0) drain_stderr();
      if (fds[0].revents != 0) return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const int n =
        poll(polled.data(), nfds_t(polled.size()), int(std::min<int64_t>(left.count(), 1 << 30)));
    if (n < 0 && errno != EINTR) return false;
    ready = n > 0;
  }
}

void ChildProcess::write_request(const std::string& bytes, const std::string& call) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t put = ::write(to_child_, bytes.data() + done, bytes.size() - done);
    if (put > 0) {
      done += size_t(put);
      continue;
    }
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && errno == EAGAIN) {
      if (!wait_ready(to_child_, POLLOUT))
        fail(call,
             "it did not read its request within " + std::to_string(timeout_.count()) + " ms");
      continue;
    }
    fail(call, "");  // EPIPE: it is gone
  }
}

bool ChildProcess::fill(size_t needed, const std::string& call) {
  // Room for `needed` unconsumed bytes (parse_reply bounds it by the
  // request's limits), reading at least a chunk at a time.
  if (in_pos_ > 0 && in_pos_ + needed > in_.size()) {
    std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
    in_end_ -= in_pos_, in_pos_ = 0;
  }
  if (in_.size() < std::max(needed, kReadChunk)) in_.resize(std::max(needed, kReadChunk));
  if (!wait_ready(from_child_, POLLIN))
    fail(call, "no reply within " + std::to_string(timeout_.count()) + " ms");
  ssize_t got;
  do got = ::read(from_child_, in_.data() + in_end_, in_.size() - in_end_);
  while (got < 0 && errno == EINTR);
  if (got > 0) in_end_ += size_t(got);
  return got > 0;
}

Reply ChildProcess::read_reply(const std::string& call, const wire::ReplyLimits& limits) {
  for (;;) {
    wire::ReplyParse p = wire::parse_reply({in_.data() + in_pos_, in_end_ - in_pos_}, limits);
    if (p.status == wire::ReplyParse::Status::kComplete) {
      in_pos_ += p.size;
      if (in_pos_ == in_end_) in_pos_ = in_end_ = 0;
      return std::move(p.reply);
    }
    if (p.status == wire::ReplyParse::Status::kMalformed) fail(call, "malformed reply: " + p.error);
    if (!fill(p.size, call)) fail(call, "");
  }
}

namespace {

std::optional<int64_t> engine_of(const nlohmann::json& request) {
  const auto it = request.find("engine");
  if (it == request.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

void ChildProcess::post(const nlohmann::json& request, bool refusal_matters,
                        std::optional<int64_t> engine) {
  const std::string op = request.value("op", std::string("request"));
  std::optional<int64_t> load;
  if (const auto model = request.find("model");
      op == "load" && model != request.end() && model->is_number_integer())
    load = model->get<int64_t>();
  enqueue(request,
          {op, refusal_matters, std::nullopt, {}, engine ? engine : engine_of(request), load});
}

bool ChildProcess::load_unread(int64_t model) const {
  for (const Posted& p : posted_)
    if (p.load == model) return true;
  return false;
}

void ChildProcess::post_keeping(const nlohmann::json& request, int64_t tag,
                                const wire::ReplyLimits& limits) {
  enqueue(request, {request.value("op", std::string("request")), false, tag, limits,
                    engine_of(request), std::nullopt});
}

void ChildProcess::enqueue(const nlohmann::json& request, Posted posted) {
  if (pid_ <= 0) throw ChildFault(gone(posted.op));
  std::string framed = wire::frame(request.dump());
  make_room(framed.size());
  unsent_ += framed;
  posted_.push_back(std::move(posted));
  if (unsent_.size() > kMaxUnsent || posted_.size() >= kMaxPosted) drain();
}

// A write of several requests must fit in the pipe: while kvcheck blocks on
// a full stdin the child may block on a full stdout (the replies to the
// first requests), and neither reads. So the requests waiting to go out are
// written (and their replies read) before they would pass kMaxUnsent bytes;
// a larger request then goes out alone, and the child reads it whole before
// it replies.
void ChildProcess::make_room(size_t bytes) {
  if (!unsent_.empty() && unsent_.size() + bytes > kMaxUnsent) drain();
}

Reply ChildProcess::take_kept(int64_t tag) {
  auto it = kept_.find(tag);
  if (it == kept_.end() || it->second.empty()) {
    // Replies read before the child failed are still returned, in order; the
    // fault is thrown to the call whose reply never came.
    if (!fault_.empty()) throw ChildFault(fault_);
    if (pid_ <= 0) throw ChildFault(gone("step"));
    try {
      drain();
    } catch (const ChildFault& e) {
      fault_ = e.what();
    }
    it = kept_.find(tag);
    if ((it == kept_.end() || it->second.empty()) && !fault_.empty()) throw ChildFault(fault_);
  }
  throw_refusal();
  if (it == kept_.end() || it->second.empty())
    throw std::logic_error("exec: no reply posted for engine " + std::to_string(tag));
  Reply reply = std::move(it->second.front());
  it->second.pop_front();
  return reply;
}

void ChildProcess::throw_refusal() {
  if (!refused_ahead_) return;
  const std::string message = std::move(refused_ahead_->message);
  refused_ahead_.reset();
  throw RefusedAhead(message);
}

void ChildProcess::settle(int64_t engine) {
  drain();
  if (refused_ahead_ && refused_ahead_->engine == engine) throw_refusal();
}

void ChildProcess::forget(int64_t tag) {
  if (refused_ahead_ && refused_ahead_->engine == tag) refused_ahead_.reset();
  for (Posted& p : posted_)
    if (p.engine == tag) p.refusal_matters = false;  // its reply is not read yet
  kept_.erase(tag);
  for (const Posted& p : posted_) {
    if (p.keep == tag) forgotten_.insert(tag);
  }
}

void ChildProcess::flush(const std::string& call) {
  if (unsent_.empty()) return;
  deadline_ = std::chrono::steady_clock::now() + timeout_;
  write_request(unsent_, call);
  unsent_.clear();
}

void ChildProcess::drain() {
  // A child gone while these are written died on the oldest one it has not
  // answered: that is the call to name, not the last one queued (a destroy).
  flush(posted_.empty() ? std::string("request") : posted_.front().op);
  for (const Posted& earlier : posted_) {
    // The per-call timeout holds for each reply: a batch of slow steps is
    // not a hang.
    deadline_ = std::chrono::steady_clock::now() + timeout_;
    Reply r = read_reply(earlier.op, earlier.keep ? earlier.limits : wire::ReplyLimits{});
    if (earlier.keep) {
      if (!forgotten_.count(*earlier.keep)) kept_[*earlier.keep].push_back(std::move(r));
      continue;
    }
    if (r.error && earlier.load) refused_loads_.push_back(*earlier.load);
    if (r.error && earlier.refusal_matters && !refused_ahead_) {
      refused_ahead_ =
          Refusal{earlier.engine, "exec " + command_ + ": " + earlier.op +
                                      " (sent without waiting) was refused: " + r.error->kind +
                                      ": " + wire::error_text(*r.error)};
    }
  }
  posted_.clear();
  forgotten_.clear();
}

Reply ChildProcess::call(const nlohmann::json& request, const wire::ReplyLimits& limits) {
  const std::string name = request.value("op", std::string("request"));
  if (pid_ <= 0) throw ChildFault(gone(name));
  std::string framed = wire::frame(request.dump());
  make_room(framed.size());
  unsent_ += framed;
  flush(posted_.empty() ? name : posted_.front().op);
  drain();
  deadline_ = std::chrono::steady_clock::now() + timeout_;
  Reply reply = read_reply(name, limits);
  throw_refusal();
  return reply;
}

}  // namespace kvcheck
