// Reading what a command printed: the outputs of busybox nslookup/wget, of the fixture tools
// (sbx-cpu, sbx-memhog) and of the clean check. Pure functions, unit-tested against the exact
// bytes busybox prints (see evidence_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace sandcheck {

// What the network part of a command met, told apart as the demo does.
enum class WgetOutcome {
  kNotRun,        // no wget output seen
  kBadAddress,    // "wget: bad address 'NAME'": the name did not resolve
  kHttp403,       // "server returned error: HTTP/1.1 403 Forbidden": the gateway refused
  kHttpError,     // another HTTP error status
  kOk,            // wget_exit=0: data came back
  kUnreachable,   // "Network is unreachable" / "No route to host"
  kRefused,       // "Connection refused"
  kTimeout,       // "timed out"
  kOtherFailure,  // a non-zero wget exit with none of the above
};

enum class LookupOutcome {
  kNotRun,      // no nslookup output
  kNxdomain,    // "** server can't find NAME: NXDOMAIN"
  kResolved,    // an address came back for the name
  kNoServer,    // "no servers could be reached" / timed out: no resolver at all
  kOtherError,  // SERVFAIL, REFUSED, ...
};

struct NetEvidence {
  LookupOutcome lookup = LookupOutcome::kNotRun;
  WgetOutcome wget = WgetOutcome::kNotRun;
  int wget_exit = -1;     // from "wget_exit=N" (-1: not printed)
  int http_status = 0;    // for kHttp403 / kHttpError
  std::string wget_line;  // the line wget printed about it
  std::string lookup_line;

  std::string Summary() const;  // "NXDOMAIN", "bad address", "403 from the gateway", ...
  nlohmann::json ToJson() const;
};

NetEvidence ClassifyNetwork(const std::string& stdout_text, const std::string& stderr_text);

// The host a line of the mirror fixture's request log names ("GET /x host=NAME[:PORT]"),
// lower-cased, without the port; "" if the line names none.
std::string MirrorLogHost(const std::string& line);

const char* WgetOutcomeName(WgetOutcome w);
const char* LookupOutcomeName(LookupOutcome l);

// "wall_seconds W cpu_seconds C threads T" from sbx-cpu.
struct CpuToolOutput {
  double wall_seconds = -1, cpu_seconds = -1;
  int threads = 0;
};
std::optional<CpuToolOutput> ParseCpuTool(const std::string& stdout_text);

// The clean check's stdout ("0\n") → number of files; nullopt if it is not one integer.
std::optional<int64_t> ParseFileCount(const std::string& stdout_text);

// `sbx-canary plant` (fixtures/tools/sbx-canary.c): the kinds planted, those that could not be
// (kind → errno name), the listening socket's port (0: none).
struct CanaryPlant {
  std::vector<std::string> planted;
  std::map<std::string, std::string> not_planted;
  int port = 0;
};
std::optional<CanaryPlant> ParseCanaryPlant(const std::string& stdout_text);
// `sbx-canary check`: the kinds that survived and the kinds looked at.
struct CanaryCheck {
  std::vector<std::string> survivors, checked;
};
std::optional<CanaryCheck> ParseCanaryCheck(const std::string& stdout_text);

// sbx-memhog's progress: the N of its last "allocated N MiB" line, "done N MiB" as done.
struct HogProgress {
  int64_t last_mib = -1;  // -1: no progress line
  bool done = false;
};
HogProgress ParseHogProgress(const std::string& stdout_text);

// Last `n` bytes of `s`, prefixed with "..." when cut (evidence tails).
std::string TailOf(const std::string& s, size_t n);

}  // namespace sandcheck
