#include "backend/common/fs_layer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

extern char** environ;

namespace sbx::backend {
namespace {

// Runs a host program (argv) and waits.
Status RunAndWait(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return ErrnoStatus("spawn " + args[0], rc);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal(fmt::format("{} failed (status {})", fmt::join(args, " "), status));
  }
  return Status::Ok();
}

}  // namespace

Status CopyWritableLayer(pid_t init_pid, const std::string& tar_path, const std::string& dir) {
  std::vector<std::string> out = {"/bin/tar", "--numeric-owner",
                                  "-C",       fmt::format("/proc/{}/root", init_pid),
                                  "-cpf",     tar_path};
  for (const char* d : kWritableDirs) out.push_back(d);
  std::error_code ec;
  Status st = RunAndWait(out);
  if (st.ok()) {
    std::filesystem::create_directories(dir, ec);
    if (ec) st = Internal(fmt::format("creating {}: {}", dir, ec.message()));
  }
  if (st.ok()) st = RunAndWait({"/bin/tar", "--numeric-owner", "-C", dir, "-xpf", tar_path});
  unlink(tar_path.c_str());
  if (!st.ok()) std::filesystem::remove_all(dir, ec);  // no half layer left behind
  return st.WithContext("snapshot");
}

}  // namespace sbx::backend
