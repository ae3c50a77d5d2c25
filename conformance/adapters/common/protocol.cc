#include "common/protocol.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>

#include "common/fs_util.h"
#include "common/image.h"
#include "common/json_io.h"

namespace sandcheck::adapter {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitUnknownOp = 64;
constexpr double kMaxTimeout = 24 * 3600;

bool Declared(const Description& d, std::string_view feature) {
  return std::find(d.features.begin(), d.features.end(), feature) != d.features.end();
}

// A limit that was asked for but that this adapter does not enforce: said on stderr, never
// silently; the harness reads `info` and reports the check as a skip with the reason.
void NoteIgnored(const Description& d, const char* feature, const char* key,
                 const std::optional<int64_t>& value) {
  if (!value || *value == 0 || Declared(d, feature)) return;
  auto it = d.unsupported.find(feature);
  fmt::print(stderr, "sandcheck-adapter-{}: note: {}={} is NOT enforced: {}\n", d.name, key, *value,
             it != d.unsupported.end() ? it->second : "not supported");
}

sbx::Status ValidateEgress(const Json& egress) {
  RETURN_IF_ERROR(CheckKeys(egress, {"rules"}, "egress"));
  auto it = egress.find("rules");
  if (it == egress.end() || it->is_null()) return sbx::Status::Ok();
  if (!it->is_array()) return sbx::InvalidArgument("egress.rules must be an array");
  for (const auto& rule : *it) {
    RETURN_IF_ERROR(CheckKeys(rule, {"kind", "hosts", "ports"}, "egress rule"));
    ASSIGN_OR_RETURN(auto kind, OptString(rule, "kind"));
    if (kind && *kind != "http" && *kind != "tls") {
      return sbx::InvalidArgument("egress rule kind must be \"http\" or \"tls\"");
    }
    for (const char* key : {"hosts", "ports"}) {
      auto f = rule.find(key);
      if (f != rule.end() && !f->is_null() && !f->is_array()) {
        return sbx::InvalidArgument(fmt::format("egress rule {} must be an array", key));
      }
    }
  }
  return sbx::Status::Ok();
}

sbx::StatusOr<std::map<std::string, std::string>> StringMap(const Json& obj,
                                                            std::string_view what) {
  std::map<std::string, std::string> out;
  if (!obj.is_object()) return sbx::InvalidArgument(fmt::format("{} must be an object", what));
  for (const auto& [k, v] : obj.items()) {
    if (!v.is_string()) return sbx::InvalidArgument(fmt::format("{}.{} must be a string", what, k));
    out[k] = v.get<std::string>();
  }
  return out;
}

class Ops {
 public:
  Ops(Runtime& rt, Supervisor& sup)
      : rt_(rt), sup_(sup), desc_(rt.Describe()), store_(desc_.name) {}

  sbx::StatusOr<Json> Info() {
    ASSIGN_OR_RETURN(std::string version, rt_.Version(sup_));
    return Json{{"name", desc_.name},
                {"version", version},
                {"backends", desc_.backends},
                {"features", desc_.features},
                {"unsupported", desc_.unsupported}};
  }

  sbx::StatusOr<Json> Create(const Json& in) {
    RETURN_IF_ERROR(CheckKeys(in,
                              {"template", "backend", "tenant", "tool", "trust", "limits", "egress",
                               "hosts", "env", "secrets"},
                              "create"));
    SandboxRecord rec;
    ASSIGN_OR_RETURN(auto tmpl, OptString(in, "template"));
    rec.template_name = tmpl.value_or("sandbox");
    ASSIGN_OR_RETURN(auto backend, OptString(in, "backend"));
    rec.backend = backend.value_or(desc_.backends.front());
    if (std::find(desc_.backends.begin(), desc_.backends.end(), rec.backend) ==
        desc_.backends.end()) {
      // No worker here can provision it: the spec's provisioning failure (FAIL-1, SEL-5),
      // never a sandbox on another backend.
      return sbx::Status(sbx::Code::kSandboxUnavailable,
                         fmt::format("backend \"{}\" is not offered by this adapter ({})",
                                     rec.backend, fmt::join(desc_.backends, ", ")));
    }
    for (const char* key : {"tenant", "tool", "trust"}) {
      ASSIGN_OR_RETURN(auto unused, OptString(in, key));
      (void)unused;  // accepted and recorded nowhere: one sandbox serves one caller here
    }
    ASSIGN_OR_RETURN(auto limits, OptObject(in, "limits"));
    if (limits) {
      RETURN_IF_ERROR(CheckKeys(
          *limits, {"cpu_millicores", "memory_bytes", "pids", "disk_bytes", "fds"}, "limits"));
      ASSIGN_OR_RETURN(rec.limits.cpu_millicores, OptCount(*limits, "cpu_millicores"));
      ASSIGN_OR_RETURN(rec.limits.memory_bytes, OptCount(*limits, "memory_bytes"));
      ASSIGN_OR_RETURN(rec.limits.pids, OptCount(*limits, "pids"));
      ASSIGN_OR_RETURN(rec.limits.disk_bytes, OptCount(*limits, "disk_bytes"));
      ASSIGN_OR_RETURN(rec.limits.fds, OptCount(*limits, "fds"));
    }
    ASSIGN_OR_RETURN(auto egress, OptObject(in, "egress"));
    if (egress) RETURN_IF_ERROR(ValidateEgress(*egress));
    ASSIGN_OR_RETURN(auto hosts, OptObject(in, "hosts"));
    if (hosts) RETURN_IF_ERROR(StringMap(*hosts, "hosts").status());
    ASSIGN_OR_RETURN(auto env, OptObject(in, "env"));
    if (env) {
      ASSIGN_OR_RETURN(rec.env, StringMap(*env, "env"));
      for (const auto& [k, v] : rec.env) {
        if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos) {
          return sbx::InvalidArgument(fmt::format("bad environment variable name \"{}\"", k));
        }
      }
    }
    auto secrets = in.find("secrets");
    if (secrets != in.end() && !secrets->is_null() && !secrets->empty() &&
        !Declared(desc_, "secrets")) {
      return sbx::Unsupported("secrets: " + desc_.unsupported["secrets"]);
    }
    NoteIgnored(desc_, "limits.cpu", "cpu_millicores", rec.limits.cpu_millicores);
    NoteIgnored(desc_, "limits.memory", "memory_bytes", rec.limits.memory_bytes);
    NoteIgnored(desc_, "limits.pids", "pids", rec.limits.pids);
    NoteIgnored(desc_, "limits.disk", "disk_bytes", rec.limits.disk_bytes);
    NoteIgnored(desc_, "limits.fds", "fds", rec.limits.fds);
    if (egress && egress->contains("rules") && !(*egress)["rules"].empty() &&
        !Declared(desc_, "egress")) {
      fmt::print(stderr,
                 "sandcheck-adapter-{}: note: egress rules are NOT applied: {}; the sandbox "
                 "reaches nothing\n",
                 desc_.name, desc_.unsupported["egress"]);
    }

    ASSIGN_OR_RETURN(ImageRef image, ResolveTemplate(rec.template_name));
    rec.image = image.digest;
    ASSIGN_OR_RETURN(rec.id, store_.Allocate());
    auto made = Populate(rec, image);
    if (!made.ok()) {
      if (auto rm = store_.Remove(rec.id); !rm.ok()) {
        fmt::print(stderr, "sandcheck-adapter-{}: cleanup after failed create: {}\n", desc_.name,
                   rm.ToString());
      }
      return made;
    }
    return Json{{"sandbox", rec.id}};
  }

  sbx::StatusOr<Json> Exec(const Json& in) {
    RETURN_IF_ERROR(CheckKeys(in, {"sandbox", "cmd", "timeout_s"}, "exec"));
    ASSIGN_OR_RETURN(std::string id, RequireString(in, "sandbox"));
    ExecRequest req;
    ASSIGN_OR_RETURN(req.cmd, RequireString(in, "cmd"));
    ASSIGN_OR_RETURN(auto timeout, OptNumber(in, "timeout_s"));
    if (timeout) {
      if (*timeout <= 0 || *timeout > kMaxTimeout) {
        return sbx::InvalidArgument("timeout_s must be in (0, 86400]");
      }
      req.timeout_s = *timeout;
    }
    if (req.cmd.find('\0') != std::string::npos) return sbx::InvalidArgument("cmd contains NUL");
    ASSIGN_OR_RETURN(UniqueFd lock, store_.Lock(id));
    ASSIGN_OR_RETURN(SandboxRecord rec, store_.Load(id));
    SandboxContext ctx = Context(rec);
    ExecResult res;
    if (rec.crashed) {
      // RES-8: a breached hard limit ended this sandbox; only a revert brings it back.
      res.status = "sandbox_unavailable";
      res.state = "CRASHED";
      res.err = "sandbox ended by a resource limit; revert it first\n";
    } else {
      if (rec.container_live) RETURN_IF_ERROR(rt_.Cleanup(sup_, ctx));
      ASSIGN_OR_RETURN(res, rt_.Exec(sup_, ctx, req));
      if (res.status == "resource_exceeded" || res.state == "CRASHED") {
        rec.crashed = true;
        RETURN_IF_ERROR(store_.Save(rec));
      }
    }
    return Json{{"status", res.status},
                {"state", res.state},
                {"exit", res.exit ? Json(*res.exit) : Json(nullptr)},
                {"stdout", res.out},
                {"stderr", res.err},
                {"seconds", res.seconds}};
  }

  sbx::StatusOr<Json> Revert(const Json& in) {
    auto start = Clock::now();
    RETURN_IF_ERROR(CheckKeys(in, {"sandbox"}, "revert"));
    ASSIGN_OR_RETURN(std::string id, RequireString(in, "sandbox"));
    ASSIGN_OR_RETURN(UniqueFd lock, store_.Lock(id));
    ASSIGN_OR_RETURN(SandboxRecord rec, store_.Load(id));
    SandboxContext ctx = Context(rec);
    RETURN_IF_ERROR(rt_.Cleanup(sup_, ctx));
    // SNAP-2 / SCN-7: the only state kept between execs is /work (the rootfs is mounted
    // read-only and every exec starts a fresh container), so the golden state is an empty /work.
    RETURN_IF_ERROR(EmptyDirectory(ctx.work));
    rec.crashed = false;
    RETURN_IF_ERROR(store_.Save(rec));
    return Json{{"seconds", SecondsSince(start)}};
  }

  sbx::StatusOr<Json> Destroy(const Json& in) {
    auto start = Clock::now();
    RETURN_IF_ERROR(CheckKeys(in, {"sandbox"}, "destroy"));
    ASSIGN_OR_RETURN(std::string id, RequireString(in, "sandbox"));
    ASSIGN_OR_RETURN(UniqueFd lock, store_.Lock(id));
    ASSIGN_OR_RETURN(SandboxRecord rec, store_.Load(id));
    SandboxContext ctx = Context(rec);
    RETURN_IF_ERROR(rt_.Cleanup(sup_, ctx));
    RETURN_IF_ERROR(store_.Remove(id));  // FS-4, LC-8: scratch wiped on destroy
    return Json{{"seconds", SecondsSince(start)}};
  }

  sbx::StatusOr<Json> PutFile(const Json& in) {
    RETURN_IF_ERROR(CheckKeys(in, {"sandbox", "path", "content_b64", "mode"}, "put_file"));
    ASSIGN_OR_RETURN(std::string id, RequireString(in, "sandbox"));
    ASSIGN_OR_RETURN(std::string path, RequireString(in, "path"));
    ASSIGN_OR_RETURN(std::string b64, RequireString(in, "content_b64"));
    ASSIGN_OR_RETURN(auto mode, OptCount(in, "mode"));
    if (mode && *mode > 0777) return sbx::InvalidArgument("mode must be at most 0777");
    constexpr std::string_view kWork = "/work/";
    if (path.rfind(kWork, 0) != 0 || path.size() == kWork.size()) {
      return sbx::InvalidArgument(
          "put_file: path must be below /work (the only place kept between execs)");
    }
    ASSIGN_OR_RETURN(std::string content, DecodeBase64(b64));
    ASSIGN_OR_RETURN(UniqueFd lock, store_.Lock(id));
    ASSIGN_OR_RETURN(SandboxRecord rec, store_.Load(id));
    RETURN_IF_ERROR(WriteFileBeneath(store_.Work(id), path.substr(kWork.size()), content,
                                     static_cast<mode_t>(mode.value_or(0644)), kSandboxUid,
                                     kSandboxGid));
    return Json::object();
  }

 private:
  SandboxContext Context(SandboxRecord& rec) {
    return SandboxContext{rec, store_, store_.Dir(rec.id), store_.Rootfs(rec.id),
                          store_.Work(rec.id)};
  }

  sbx::Status Populate(SandboxRecord& rec, const ImageRef& image) {
    SandboxContext ctx = Context(rec);
    if (mkdir(ctx.rootfs.c_str(), 0755) != 0) return sbx::ErrnoStatus("mkdir rootfs");
    // SNAP-1, IMG-1: every sandbox starts from its own copy of the verified golden image.
    RETURN_IF_ERROR(UnpackVerified(sup_, image, ctx.rootfs));
    if (mkdir(ctx.work.c_str(), 0755) != 0) return sbx::ErrnoStatus("mkdir work");
    if (chown(ctx.work.c_str(), kSandboxUid, kSandboxGid) != 0)
      return sbx::ErrnoStatus("chown work");
    RETURN_IF_ERROR(store_.Save(rec));
    return rt_.Prepare(sup_, ctx);
  }

  Runtime& rt_;
  Supervisor& sup_;
  Description desc_;
  SandboxStore store_;
};

int Fail(const sbx::Status& st, const std::string& name) {
  int code = kExitFailed;
  if (st.code() == sbx::Code::kInvalidArgument || st.code() == sbx::Code::kNotFound) {
    code = kExitBadInput;
  }
  std::cout << Dump(
                   Json{{"error", {{"code", sbx::CodeName(st.code())}, {"message", st.message()}}}})
            << std::endl;
  fmt::print(stderr, "sandcheck-adapter-{}: {}\n", name, st.ToString());
  return code;
}

}  // namespace

sbx::StatusOr<std::string> DecodeBase64(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = value(c);
    if (v < 0) return sbx::InvalidArgument("content_b64 is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (bits >= 6) return sbx::InvalidArgument("content_b64 has a truncated final group");
  return out;
}

int AdapterMain(int argc, char** argv, Runtime& runtime) {
  Description desc = runtime.Describe();
  std::string op = argc >= 2 ? argv[1] : "";
  static const char* kOps[] = {"info", "create", "exec", "revert", "destroy", "put_file"};
  if (argc != 2 ||
      std::none_of(std::begin(kOps), std::end(kOps), [&](const char* o) { return op == o; })) {
    std::cout << Dump(Json{{"error",
                            {{"code", "unsupported"},
                             {"message", fmt::format("unknown or unsupported op \"{}\"", op)}}}})
              << std::endl;
    fmt::print(
        stderr,
        "usage: sandcheck-adapter-{} info|create|exec|revert|destroy|put_file < request.json\n"
        "(adapter protocol v1; docs/adapters.md)\n",
        desc.name);
    return kExitUnknownOp;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto request = ParseObject(input);
  if (!request.ok()) return Fail(request.status(), desc.name);

  // runc lives in /usr/sbin: make sure a bare environment can still find the runtimes.
  if (const char* path = std::getenv("PATH"); path == nullptr || *path == '\0') {
    setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
  }
  if (auto st = runtime.SetUpProcess(); !st.ok()) return Fail(st, desc.name);
  auto sup = Supervisor::Create(runtime.NeedsSubreaper());
  if (!sup.ok()) return Fail(sup.status(), desc.name);
  Ops ops(runtime, **sup);

  sbx::StatusOr<Json> out = sbx::InvalidArgument("unreachable");
  if (op == "info") {
    out = CheckKeys(*request, {}, "info").ok()
              ? ops.Info()
              : sbx::StatusOr<Json>(sbx::InvalidArgument("info takes an empty object"));
  } else if (op == "create") {
    out = ops.Create(*request);
  } else if (op == "exec") {
    out = ops.Exec(*request);
  } else if (op == "revert") {
    out = ops.Revert(*request);
  } else if (op == "destroy") {
    out = ops.Destroy(*request);
  } else if (op == "put_file") {
    out = ops.PutFile(*request);
  }
  if (!out.ok()) return Fail(out.status(), desc.name);
  std::cout << Dump(*out) << std::endl;
  return kExitOk;
}

}  // namespace sandcheck::adapter
