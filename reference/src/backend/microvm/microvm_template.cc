// The golden VM (Template: boot, warm, save; open a saved one) and its clones (Vm: prepare,
// restore, clone): microvm_vm.h.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/microvm/microvm_channels.h"
#include "backend/microvm/microvm_vm.h"

namespace sbx::microvm {
namespace {
using json = nlohmann::json;
}  // namespace

// ---------------------------------------------------------------------------------------------
// Template

namespace {
StatusOr<std::string> MakeDir(const std::string& root, const char* prefix) {
  std::string tmpl = root + "/" + prefix + "XXXXXX";
  if (!mkdtemp(tmpl.data())) return ErrnoStatus("mkdtemp " + tmpl);
  return tmpl;
}

Status CheckInputs(const VmConfig& cfg) {
  for (const auto* p : {&cfg.vmlinux, &cfg.initramfs})
    if (p->empty() || access(p->c_str(), R_OK) != 0)
      return NotFound("guest image file missing: " + *p);
  if (cfg.memory_mb < 128) return InvalidArgument("memory_mb under 128: the guest kernel panics");
  return Status::Ok();
}
}  // namespace

Template::~Template() {
  if (!keep_files_) Remove();
}

void Template::Remove() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  dir_.clear();
}

namespace {

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// What template.json records about the guest and the machine, for Open to compare.
json TemplateFacts(const VmConfig& cfg, uint32_t tsc_khz) {
  return json{{"machine_revision", kMachineRevision},
              {"protocol_version", proto::kVersion},
              {"qemu", cfg.qemu},
              {"memory_mb", cfg.memory_mb},
              {"tsc_khz", tsc_khz},
              {"vmlinux_bytes", FileSize(cfg.vmlinux)},
              {"initramfs_bytes", FileSize(cfg.initramfs)}};
}
}  // namespace

StatusOr<std::unique_ptr<Template>> Template::Boot(const VmConfig& cfg) {
  RETURN_IF_ERROR(CheckInputs(cfg));
  ASSIGN_OR_RETURN(std::string dir, MakeDir(cfg.state_root, "sbx-mvt-"));
  return Boot(cfg, dir);
}

StatusOr<std::unique_ptr<Template>> Template::Boot(const VmConfig& cfg, const std::string& dir) {
  RETURN_IF_ERROR(CheckInputs(cfg));
  if (dir.empty()) return InvalidArgument("Template::Boot: empty directory");
  auto t0 = Clock::now();
  std::unique_ptr<Template> t(new Template());
  t->cfg_ = cfg;
  {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Internal("creating " + dir + ": " + ec.message());
  }
  t->dir_ = dir;  // removed by the destructor from here on, whatever fails below
  // An earlier template here is incomplete from now on.
  for (const char* f :
       {"/template.json", "/golden.state", "/golden.ram", "/qmp.sock", "/agent.sock"})
    unlink((dir + f).c_str());
  uint32_t khz = cfg.tsc_khz;
  if (!khz) {
    ASSIGN_OR_RETURN(khz, HostTscKhz());
  }
  // The golden VM lives in the template's directory; its sockets and logs go with it.
  std::unique_ptr<QemuVm> golden(new QemuVm());
  golden->remove_dir_ = false;
  VmConfig gcfg = cfg;
  gcfg.tsc_khz = khz;  // the figure template.json records
  Status st = golden->Start(gcfg, t->dir_, t->ram_path(), /*share_ram=*/true, {}, {});
  if (!st.ok()) return st.WithContext("booting the golden VM");
  // READY: the agent is up and listening on its port.
  auto ready = golden->agent_->Receive(Clock::now() + cfg.boot_timeout);
  if (!ready.ok())
    return Status(ready.status().code(), "golden VM: no READY from the guest agent: " +
                                             ready.status().message() + golden->Diagnostics());
  if (ready->type != proto::kReady)
    return Status(Code::kToolError,
                  fmt::format("golden VM: first frame is type 0x{:x}, not READY", ready->type));
  if (const auto* k = ready->Find(proto::kKernel)) t->guest_kernel_ = k->value;
  if (const auto* c = ready->Find(proto::kCgroup)) t->guest_cgroup_ = c->value;
  if (const auto* v = ready->Find(proto::kAgentVersion)) t->agent_version_ = v->value;
  {
    auto root = proto::FieldFlag(*ready, proto::kHasRoot);
    if (!root.ok()) return Status(Code::kToolError, "golden VM: READY: " + root.status().message());
    t->has_root_ = *root;
  }
  t->stages_.Add("boot", MsSince(t0));
  RETURN_IF_ERROR(golden->Ping().WithContext("golden VM"));
  // One command and one set-clock before the save, so that what every clone's first command
  // needs in the guest (busybox's pages, the cgroup files, dentries) is already in the RAM file.
  {
    ExecRequest warm;
    warm.argv = {"echo", "warm"};
    auto w = golden->Exec(warm);
    if (!w.ok()) return w.status().WithContext("golden VM warm-up command");
    if (w->stdout_data != "warm\n" || w->exit_code.value_or(-1) != 0)
      return Status(Code::kToolError, "golden VM warm-up command: got \"" + w->stdout_data + "\"" +
                                          golden->Diagnostics());
    RETURN_IF_ERROR(golden->SyncClockAndReseed().WithContext("golden VM"));
  }
  t->stages_.Add("warm", MsSince(t0));
  // Pause, then save the device state; RAM stays in the shared file (x-ignore-shared).
  auto t1 = Clock::now();
  auto deadline = Clock::now() + cfg.control_timeout;
  RETURN_IF_ERROR(golden->Stop().WithContext("golden VM"));
  RETURN_IF_ERROR(golden->SetMigrationCapabilities(deadline).WithContext("golden VM"));
  RETURN_IF_ERROR(
      golden->MigrateToFile(t->state_path(), deadline).WithContext("saving the golden VM"));
  t->stages_.Add("save", MsSince(t1));
  // The golden QEMU must never run again: the RAM file is now the clones' base.
  RETURN_IF_ERROR(golden->Destroy());
  for (const char* f : {"/qmp.sock", "/agent.sock"}) unlink((t->dir_ + f).c_str());
  // template.json last, by rename: a directory that has it holds a complete template.
  json facts = TemplateFacts(cfg, khz);
  facts["guest_kernel"] = t->guest_kernel_;
  facts["guest_cgroup"] = t->guest_cgroup_;
  facts["agent_version"] = t->agent_version_;
  facts["has_root"] = t->has_root_;
  {
    std::string tmp = t->json_path() + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << facts.dump(2) << "\n";
    out.close();
    if (!out) return Internal("writing " + tmp);
    if (rename(tmp.c_str(), t->json_path().c_str()) < 0) return ErrnoStatus("renaming " + tmp);
  }
  t->stages_.Add("total", MsSince(t0));
  return t;
}

StatusOr<std::unique_ptr<Template>> Template::Open(const VmConfig& cfg, const std::string& dir) {
  RETURN_IF_ERROR(CheckInputs(cfg));
  std::unique_ptr<Template> t(new Template());
  t->cfg_ = cfg;
  t->dir_ = dir;
  t->keep_files_ = true;  // until it is adopted: a failed Open never removes someone's files
  std::ifstream in(t->json_path());
  if (!in) return NotFound("no template in " + dir + " (template.json missing)");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return FailedPrecondition(t->json_path() + " is not a JSON object");
  uint32_t khz = cfg.tsc_khz ? cfg.tsc_khz : j.value("tsc_khz", 0u);  // 0: the host's, as recorded
  json want = TemplateFacts(cfg, khz);
  for (auto& [k, v] : want.items()) {
    if (!j.contains(k) || j[k] != v)
      return FailedPrecondition(fmt::format("template in {} does not match: {} is {}, want {}", dir,
                                            k, j.contains(k) ? j[k].dump() : "missing", v.dump()));
  }
  if (FileSize(t->ram_path()) != static_cast<uint64_t>(cfg.memory_mb) << 20)
    return FailedPrecondition(
        fmt::format("template in {}: golden.ram missing or not {} MiB", dir, cfg.memory_mb));
  if (FileSize(t->state_path()) == 0)
    return FailedPrecondition("template in " + dir + ": golden.state missing or empty");
  t->guest_kernel_ = j.value("guest_kernel", "");
  t->guest_cgroup_ = j.value("guest_cgroup", "");
  t->agent_version_ = j.value("agent_version", "");
  t->has_root_ = j.value("has_root", false);
  t->keep_files_ = false;
  return t;
}

// ---------------------------------------------------------------------------------------------
// Vm

StatusOr<std::unique_ptr<Vm>> Vm::Prepare(const Template& t, const PrepareOptions& popts) {
  if (t.dir().empty()) return FailedPrecondition("the template was removed");
  auto t0 = Clock::now();
  const VmConfig& cfg = t.config();
  std::unique_ptr<Vm> vm(new Vm());
  ASSIGN_OR_RETURN(std::string dir, MakeDir(cfg.state_root, "sbx-mv-"));
  vm->dir_ = dir;  // removed by the destructor from here on, whatever fails below
  // Same machine as the golden VM, RAM mapped privately from its file, waiting for a state.
  Status st = vm->Start(cfg, dir, t.ram_path(), /*share_ram=*/false, {"-S", "-incoming", "defer"},
                        {}, popts);
  if (!st.ok()) return st.WithContext("starting a clone");
  RETURN_IF_ERROR(
      vm->SetMigrationCapabilities(Clock::now() + cfg.control_timeout).WithContext("clone"));
  vm->template_dir_ = t.dir();
  vm->stages_.Add("prepared", MsSince(t0));
  return vm;
}

Status Vm::Restore(const Template& t, Options opts) {
  if (!alive() || !qmp_) return FailedPrecondition("the clone's QEMU is not running");
  if (restored_) return FailedPrecondition("this clone was already restored");
  if (t.dir().empty() || t.dir() != template_dir_)
    return FailedPrecondition("the clone was prepared for another template (or it was removed)");
  return LoadState(t.state_path(), opts, t.config().control_timeout);
}

Status Vm::LoadState(const std::string& path, Options opts, std::chrono::milliseconds timeout) {
  auto t0 = Clock::now();
  auto deadline = Clock::now() + timeout;
  int sfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (sfd < 0) return ErrnoStatus("opening the saved state " + path);
  auto getfd = qmp_->Command("getfd", {{"fdname", "state"}}, deadline, sfd);
  close(sfd);
  if (!getfd.ok()) return getfd.status().WithContext("clone");
  auto inc = qmp_->Command("migrate-incoming", {{"uri", "fd:state"}}, deadline);
  if (!inc.ok()) return inc.status().WithContext("clone");
  // `cont` only after the load completed: a cont during the load is overridden by the saved
  // run state (the golden VM was paused when saved) and the clone would stay paused.
  RETURN_IF_ERROR(WaitMigrationEnd(deadline).WithContext("restoring the clone"));
  restored_ = true;
  stages_.Add("restore", MsSince(t0));
  RETURN_IF_ERROR(Resume().WithContext("clone"));
  stages_.Add("cont", MsSince(t0));
  if (opts.reseed) {
    RETURN_IF_ERROR(SyncClockAndReseed(&clock_skew_ms_).WithContext("clone"));
  } else {
    RETURN_IF_ERROR(Ping().WithContext("clone"));
  }
  stages_.Add("clock", MsSince(t0));
  return Status::Ok();
}

StatusOr<std::unique_ptr<Vm>> Vm::Clone(const Template& t, Options opts,
                                        const PrepareOptions& popts) {
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<Vm> vm, Prepare(t, popts));
  RETURN_IF_ERROR(vm->Restore(t, opts));
  vm->stages_.Add("total", MsSince(t0));
  return vm;
}

// A clone from a state file QemuVm::SaveState wrote (suspend and resume, SNAP-3).
StatusOr<std::unique_ptr<Vm>> Vm::RestoreFromState(const Template& t, const std::string& path,
                                                   const PrepareOptions& popts) {
  auto t0 = Clock::now();
  if (access(path.c_str(), R_OK) != 0) return ErrnoStatus("saved state " + path);
  // The same machine as every clone (RAM mapped privately from the template's file, x-ignore-
  // shared on as at the save); the stream holds all of the RAM the saved clone had.
  ASSIGN_OR_RETURN(std::unique_ptr<Vm> vm, Prepare(t, popts));
  RETURN_IF_ERROR(
      vm->LoadState(path, Options{}, std::max(t.config().control_timeout, kStateFileTimeout))
          .WithContext("restoring from " + path));
  vm->stages_.Add("total", MsSince(t0));
  return vm;
}

}  // namespace sbx::microvm
