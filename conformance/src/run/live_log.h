// What sandcheck prints while it runs: the demo's log on stdout, one tab-separated line per call
//   label  phase  state  http  seconds  result
// (seconds = the harness's wall clock around the call; http = the HTTP status when the target is
// reached over HTTP, "-" otherwise; result = the exec answer as JSON, as the demo printed it),
// and, when stderr is a terminal, one progress line on stderr rewritten in place.
//
// Thread-safety: one thread.
#pragma once

#include <cstdio>
#include <string>

#include "checks/records.h"

namespace sandcheck {

class LiveLog {
 public:
  // `progress`: draw the progress line (callers pass isatty(2)).
  LiveLog(std::FILE* out, std::FILE* err, bool progress);

  void Header();
  void StepLine(const std::string& label, const Step& step);
  void Progress(const std::string& text);
  void ClearProgress();

  // The result column for a step (exposed for tests).
  static std::string ResultColumn(const Step& step);

 private:
  std::FILE* out_;
  std::FILE* err_;
  bool progress_;
  bool progress_shown_ = false;
};

}  // namespace sandcheck
