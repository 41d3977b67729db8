// One child process speaking the engine protocol on its stdin/stdout: spawn,
// framed request/reply with a per-call deadline, and a verdict on how it died.
// Every failure (exit, signal, timeout, a frame over its bound, bad JSON)
// becomes a ChildFault whose message names the call, the cause and the tail
// of the child's stderr; the child is killed and reaped before it is thrown.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/exec/exec_reply.h"

namespace kvcheck {

class ChildFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A request sent without waiting (ChildProcess::post) was refused: the engine
// refused what it should have accepted. The child is fine.
class RefusedAhead : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using wire::Reply;

// How kvcheck waits on a child (exec_waits in backends/exec/exec.h reads them
// from the backend string).
struct ChildWaits {
  std::chrono::milliseconds timeout{30000};  // per call, then the child is hung
  std::chrono::microseconds spin{0};         // polled before sleeping (wire::spin_until_ready)
};

// The environment a child starts with: `base` (kvcheck's own), with
// KVCHECK_EXPORT naming the kvcheck-export beside `self` (kvcheck's own
// executable) where one is there, in place of any KVCHECK_EXPORT in `base`:
// a child that converts models (adapters/llama.cpp) then uses the exporter
// of the same build as kvcheck, never one it finds by searching.
std::vector<std::string> child_environment(char** base, const std::string& self);

class ChildProcess {
 public:
  // Starts `/bin/sh -c "exec COMMAND"` in child_environment(environ,
  // /proc/self/exe). Throws ChildFault if it cannot.
  ChildProcess(std::string command, ChildWaits waits);
  ~ChildProcess();  // closes stdin, waits briefly, then kills
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Sends `request` and reads its reply (wire::parse_reply within `limits`;
  // an error reply is returned as is). Replies of posted requests are read
  // and checked first.
  Reply call(const nlohmann::json& request, const wire::ReplyLimits& limits);

  // Sends a request whose reply carries nothing the caller needs without
  // waiting: it leaves with the next call's request, in one write (one
  // wake-up of the child instead of one per request), and its reply is read
  // before the next call's. A malformed reply fails that next call like
  // its own; an error reply is dropped where `refusal_matters` is false
  // (destroy, unload), else the next call throws a RefusedAhead after reading
  // its own reply (the stream stays in step). `engine` is the engine whose
  // run a refusal fails (settle, forget) where the request names none: a
  // load, for the engine created with it.
  void post(const nlohmann::json& request, bool refusal_matters,
            std::optional<int64_t> engine = std::nullopt);

  // The "model" ids of posted loads whose refusal has been read since the
  // last call, oldest first: those models were never loaded.
  std::vector<int64_t> take_refused_loads() { return std::exchange(refused_loads_, {}); }
  // Whether the reply to the posted load of `model` is still unread.
  bool load_unread(int64_t model) const;

  // Posts a request whose reply the caller takes later with take_kept(tag),
  // parsed within `limits` and returned as is (an error reply included).
  // Replies of one tag come back in order; forget(tag) drops those not taken.
  void post_keeping(const nlohmann::json& request, int64_t tag, const wire::ReplyLimits& limits);
  Reply take_kept(int64_t tag);
  // Drops the replies kept under `tag`, and the refusals of requests that
  // name it as their "engine": that engine is gone.
  void forget(int64_t tag);
  // Reads every posted reply and throws the first refusal of a request of
  // `engine` not yet thrown: the end of a run, where no later call would.
  void settle(int64_t engine);

  // Writes the posted requests and reads their replies (posting does so
  // itself before the unread replies or the unsent bytes grow too many).
  void drain();
  // Writes the posted requests now, without reading any reply, so that the
  // child works on them while kvcheck does something else.
  void send() { flush(posted_.empty() ? std::string("request") : posted_.front().op); }

  // Kills the child and throws a ChildFault naming `call` and `reason`.
  [[noreturn]] void fail(const std::string& call, const std::string& reason);

  bool alive() const { return pid_ > 0; }
  // The exit code of a child that exited (not killed); -1 while it runs. The
  // shell's 126 and 127 mean the command could not start.
  int exit_code() const { return exit_code_; }

 private:
  void write_request(const std::string& bytes, const std::string& call);
  void flush(const std::string& call);  // writes unsent_
  struct Posted;
  void enqueue(const nlohmann::json& request, Posted posted);
  void make_room(size_t bytes);
  Reply read_reply(const std::string& call, const wire::ReplyLimits& limits);
  bool wait_ready(int fd, short events);  // false on the deadline; drains stderr meanwhile
  bool fill(size_t needed, const std::string& call);  // false on end of file
  void drain_stderr();
  std::string stderr_tail() const;
  std::string reap(bool kill_first);  // "exited with code 3", "killed by signal 11 (...)"
  // "exec CMD: CALL: the child is gone (after how it failed)".
  std::string gone(const std::string& call) const;
  std::chrono::steady_clock::time_point deadline_;

  std::string command_;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds spin_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  int to_child_ = -1, from_child_ = -1, child_err_ = -1;
  std::vector<uint8_t> in_;  // [bytes] read from stdout; [in_pos_, in_end_) not yet consumed
  size_t in_pos_ = 0, in_end_ = 0;
  struct Posted {
    std::string op;
    bool refusal_matters;
    std::optional<int64_t> keep;  // the tag its reply is kept under
    wire::ReplyLimits limits;
    std::optional<int64_t> engine;  // the request's "engine"
    std::optional<int64_t> load;    // a load's "model"
  };
  struct Refusal {
    std::optional<int64_t> engine;
    std::string message;
  };
  void throw_refusal();         // refused_ahead_, if any
  std::vector<Posted> posted_;  // [request] whose replies are still unread, oldest first
  std::string unsent_;          // [bytes] framed posted requests not yet written
  std::map<int64_t, std::deque<Reply>> kept_;  // [tag] replies read and not yet taken
  std::set<int64_t> forgotten_;                // tags whose replies are dropped
  std::string fault_;                          // how the child failed while kept replies were read
  std::string death_;  // the call the child failed in and how ("step: the child was killed by ...")
  // The first refusal of a posted request, not yet thrown (later ones are
  // dropped until it is: they follow from it).
  std::optional<Refusal> refused_ahead_;
  std::vector<int64_t> refused_loads_;  // take_refused_loads
  std::string err_tail_;                // the last few KiB of the child's stderr
};

}  // namespace kvcheck
