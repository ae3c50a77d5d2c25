#include "host/state_dir.h"

#include <errno.h>
#include <fmt/format.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "host/process_stamp.h"
#include "host/random_hex.h"

namespace sbx::host {
namespace {

namespace fs = std::filesystem;

std::string ReadFirstLine(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return line;
}

// Written whole under a temporary name, then renamed into place.
Status WriteWhole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
    f.flush();
    if (!f) return Status(Code::kInternal, "writing " + tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus("rename " + tmp);
  return Status::Ok();
}

}  // namespace

std::string NewRuntimeId() { return fmt::format("{}-{}", getpid(), RandomHex(3)); }

bool ParseRuntimeId(const std::string& name, pid_t* pid) {
  const size_t dash = name.find('-');
  if (dash == std::string::npos || dash == 0 || dash > 10 || name.size() != dash + 7) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (i < dash ? !std::isdigit(c) : i > dash && !std::isxdigit(c)) return false;
  }
  const long p = std::strtol(name.substr(0, dash).c_str(), nullptr, 10);
  if (p <= 0) return false;
  if (pid) *pid = static_cast<pid_t>(p);
  return true;
}

Status WriteOwnerRecord(const std::string& runtime_dir) {
  return WriteWhole(runtime_dir + "/owner", ProcessStamp(getpid()) + "\n");
}

std::string ReadOwnerRecord(const std::string& runtime_dir) {
  return ReadFirstLine(fs::path(runtime_dir) / "owner");
}

bool IsStillbornRuntimeDir(const std::string& dir) {
  pid_t pid = 0;
  if (!ParseRuntimeId(fs::path(dir).filename(), &pid)) return false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename() != "owner.tmp") return false;
  }
  if (ec) return false;
  // A live runtime may be between its mkdir and its rename: only a gone pid is stillborn.
  return kill(pid, 0) != 0 && errno == ESRCH;
}

Status WriteOwnCgroups(const std::string& runtime_dir, const std::vector<std::string>& dirs) {
  std::string text;
  for (const std::string& d : dirs) text += d + "\n";
  return WriteWhole(runtime_dir + "/cgroups", text);
}

std::vector<std::string> ReadOwnCgroups(const std::string& runtime_dir) {
  std::vector<std::string> out;
  std::ifstream f(fs::path(runtime_dir) / "cgroups");
  for (std::string dir; std::getline(f, dir);) {
    if (!dir.empty()) out.push_back(dir);
  }
  return out;
}

std::string SandboxDir(const std::string& state_dir, const std::string& instance) {
  return state_dir + "/sb/" + instance;
}

Status WriteInitRecord(const std::string& sandbox_dir, pid_t init_pid) {
  return WriteWhole(sandbox_dir + "/init", ProcessStamp(init_pid) + "\n");
}

void RemoveInitRecord(const std::string& sandbox_dir) { unlink((sandbox_dir + "/init").c_str()); }

std::vector<std::string> ReadInitRecords(const std::string& runtime_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& sb : fs::directory_iterator(fs::path(runtime_dir) / "sb", ec)) {
    out.push_back(ReadFirstLine(sb.path() / "init"));
  }
  return out;
}

}  // namespace sbx::host
