// Adapter protocol v1 (docs/adapters.md, architecture brief): `ADAPTER OP` reads one JSON object
// on stdin and writes one on stdout. Exit 0: the op was carried out (even if the command inside
// failed). Exit 1: the adapter or the runtime failed. Exit 2: bad input (malformed JSON, unknown
// keys, wrong types, no such sandbox). Exit 64: unknown or unsupported op. On a non-zero exit
// stdout carries {"error":{"code":"<sbx::CodeName>","message":"..."}} and stderr the message.
//
// AdapterMain does everything that is the same for every runtime (input validation, the state
// directory, the image, /work, revert, destroy, put_file); a Runtime supplies what differs:
// how to run one command, what it keeps between commands, and what it can enforce.
//
// Thread-safety: one op per process; single-threaded.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/sandbox_store.h"
#include "sbx/status.h"

namespace sandcheck::adapter {

// What `info` answers, apart from the version.
struct Description {
  std::string name;                                // "runc"; also the state directory's name
  std::vector<std::string> backends;               // "native", "oci", "gvisor"
  std::vector<std::string> features;               // only what the adapter really enforces
  std::map<std::string, std::string> unsupported;  // feature -> why not
};

struct ExecRequest {
  std::string cmd;
  double timeout_s = 20;
};

struct ExecResult {
  std::string status = "ok";  // ok | timeout | resource_exceeded | tool_error | sandbox_unavailable
  std::string state = "RUNNING";  // RUNNING | CRASHED
  std::optional<int> exit;
  std::string out;
  std::string err;
  double seconds = 0;
};

struct SandboxContext {
  SandboxRecord& record;
  const SandboxStore& store;
  std::string dir;
  std::string rootfs;
  std::string work;
  sbx::Status Save() const { return store.Save(record); }
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  virtual Description Describe() const = 0;
  // The runtime's own version, asked from it ("runc --version").
  virtual sbx::StatusOr<std::string> Version(Supervisor& sup) = 0;
  // Whether the adapter must be a child subreaper (the runtime daemonises the container).
  virtual bool NeedsSubreaper() const { return false; }
  // Runs first in every op, before any other thread or child exists.
  virtual sbx::Status SetUpProcess() { return sbx::Status::Ok(); }
  // After create has unpacked the rootfs and made /work.
  virtual sbx::Status Prepare(Supervisor&, SandboxContext&) { return sbx::Status::Ok(); }
  // Runs `sh -c cmd` in /work with the timeout armed. Errors mean the adapter failed.
  virtual sbx::StatusOr<ExecResult> Exec(Supervisor& sup, SandboxContext& sbx,
                                         const ExecRequest& req) = 0;
  // Removes whatever the runtime keeps for the sandbox (containers, cgroups); for revert and
  // destroy, and after an adapter that died mid-exec.
  virtual sbx::Status Cleanup(Supervisor&, SandboxContext&) { return sbx::Status::Ok(); }
};

// The whole adapter: parses argv/stdin, runs the op, prints the answer; returns the exit code.
int AdapterMain(int argc, char** argv, Runtime& runtime);

// Decodes standard base64 (with or without padding); kInvalidArgument on bad input.
sbx::StatusOr<std::string> DecodeBase64(std::string_view in);

}  // namespace sandcheck::adapter
