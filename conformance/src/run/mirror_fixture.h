// The mirror fixture (fixtures/mirror): an HTTP server on loopback that answers for the
// scenario's allow-listed mirror name. sandcheck starts it for local targets and passes
// {name: "127.0.0.1:PORT"} as `hosts` to create (the environment's service directory).
//
//   sbx-mirror --listen 127.0.0.1:0 --root DIR   prints "listening 127.0.0.1:PORT" when ready.
//
// Thread-safety: one owner. The destructor stops the server (its whole process group).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "sbx/status.h"

namespace sandcheck {

struct MirrorOptions {
  std::string binary;  // "" = $SANDCHECK_MIRROR_BIN, else <dir of sandcheck>/sbx-mirror
  std::string root;    // "" = $SANDCHECK_MIRROR_ROOT, else <source>/fixtures/mirror/content
  double start_timeout_s = 10;
};

class MirrorFixture {
 public:
  // kNotFound when the binary or content is missing (the message says how to build or point to
  // them); kTimeout when it does not say "listening" in time.
  static sbx::StatusOr<MirrorFixture> Start(const MirrorOptions& options);

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  const std::string& binary() const { return binary_; }
  const std::string& root() const { return root_; }
  // What the mirror printed after "listening" (its request log, if it keeps one), last 200 lines.
  std::vector<std::string> Log() const;
  // The request log as evidence (a check reads what really reached the mirror, not what the
  // sandbox printed): LogCount() is how many lines the mirror has written so far, a count that
  // only grows; LogSince(n) the lines after the first n (of the last 200 kept). Both first take
  // in what is already in the pipe: the mirror logs a request before it answers it, so a request
  // answered before the call returned is there.
  size_t LogCount() const;
  std::vector<std::string> LogSince(size_t since) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::string address_, binary_, root_;
};

// Directory of the running executable ("" if unknown).
std::string SelfDir();

}  // namespace sandcheck
