// commands/ — the sandcheck subcommands (cmd_*.cc, one per verb; main in sandcheck_main.cc)
// and their option parsing (this file). May include every other folder; nothing includes it
// but itself.
//
// Command-line parsing shared by the subcommands: long options as "--name VALUE" or
// "--name=VALUE", flags as "--name", "-h"/"--help" everywhere. An unknown option, a missing
// value or a repeated single option is kInvalidArgument (exit 2).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sbx/status.h"

namespace sandcheck {

// Exit codes (docs/sandcheck.md): part of the interface, never renumbered.
inline constexpr int kExitPass = 0;
inline constexpr int kExitFail = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTarget = 3;

struct OptionSpec {
  std::string name;  // without dashes
  bool takes_value = true;
  bool repeatable = false;
};

struct ParsedArgs {
  std::map<std::string, std::vector<std::string>> values;  // flags map to {"1"}
  std::vector<std::string> positional;
  bool help = false;

  bool Has(const std::string& name) const { return values.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& def = "") const;
  std::vector<std::string> All(const std::string& name) const;
};

sbx::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                    const std::vector<OptionSpec>& specs);

// "k=v" pairs of --var → map (kInvalidArgument for a malformed one).
sbx::StatusOr<std::map<std::string, std::string>> ParseVars(const std::vector<std::string>& items);

// "sandcheck run ARGS..." as a report records it: tokens never reach a report.
std::vector<std::string> MaskedCommandLine(const std::vector<std::string>& args);

// The subcommands (each returns the process exit code).
int CmdRun(const std::vector<std::string>& args);
int CmdList(const std::vector<std::string>& args);
int CmdCoverage(const std::vector<std::string>& args);
int CmdRender(const std::vector<std::string>& args);
// The latency targets (docs/nfr.md): `run --scenario nfr` (CmdRun hands over), gate, compare,
// and the reproductions of the demo's measurements.
int CmdRunNfr(const std::vector<std::string>& args, const ParsedArgs& a);   // as CmdRun parsed them
int CmdRunLoad(const std::vector<std::string>& args, const ParsedArgs& a);  // --scenario load
int CmdGate(const std::vector<std::string>& args);
int CmdCompare(const std::vector<std::string>& args);
int CmdReproduce(const std::vector<std::string>& args);

// Prints "sandcheck CMD: MESSAGE" to stderr and returns kExitUsage (or `code`).
int UsageError(const std::string& cmd, const std::string& message, int code = kExitUsage);

}  // namespace sandcheck
