// TEST DOUBLE — see sim.h. The adapter protocol side: ops, state on disk, fault switches.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "sim.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::set<std::string> Faults() {
  std::set<std::string> out;
  const char* env = std::getenv("SIM_FAULTS");
  std::stringstream ss(env ? env : "");
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.insert(item);
  }
  return out;
}

std::string StateDir() {
  const char* env = std::getenv("SIM_STATE_DIR");
  std::string dir = env && *env ? env : "/tmp/sandcheck-sim-" + std::to_string(::getuid());
  fs::create_directories(dir);
  return dir;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

[[noreturn]] void Die(const std::string& message, int code = 1) {
  std::cerr << "sim-adapter: " << message << "\n";
  std::exit(code);
}

sim::Sandbox Load(const json& in, const std::set<std::string>& faults) {
  if (!in.contains("sandbox") || !in["sandbox"].is_string()) Die("no \"sandbox\" in the request");
  sim::Sandbox sb;
  sb.root = StateDir();
  sb.dir = sb.root + "/" + in["sandbox"].get<std::string>();
  if (!fs::is_directory(sb.dir)) Die("no sandbox " + in["sandbox"].get<std::string>());
  sb.work = sb.dir + "/work";
  sb.spec = json::parse(Slurp(sb.dir + "/spec.json"));
  sb.crashed = Slurp(sb.dir + "/state") == "CRASHED";
  sb.faults = faults;
  // Faults decided per sandbox at create (flaky-network).
  std::stringstream extra(Slurp(sb.dir + "/faults"));
  for (std::string f; std::getline(extra, f, ',');) {
    if (!f.empty()) sb.faults.insert(f);
  }
  return sb;
}

std::vector<std::string> ListEnv(const char* name, std::vector<std::string> def) {
  const char* env = std::getenv(name);
  if (!env) return def;
  std::vector<std::string> out;
  std::stringstream ss(env);
  std::string f;
  while (std::getline(ss, f, ',')) {
    if (!f.empty()) out.push_back(f);
  }
  return out;
}

std::vector<std::string> Backends() { return ListEnv("SIM_BACKENDS", {"sim"}); }

json Info(const std::set<std::string>& faults) {
  std::vector<std::string> features = {"egress",     "egress.log",    "revert",      "destroy",
                                       "limits.cpu", "limits.memory", "limits.pids", "limits.disk",
                                       "limits.fds", "timeout",       "secrets",     "trust"};
  // Claims everything, enforces nothing (and has no gateway log).
  if (faults.count("no-isolation")) {
    features = {"egress",      "revert",      "destroy",    "limits.cpu", "limits.memory",
                "limits.pids", "limits.disk", "limits.fds", "timeout",    "secrets"};
  }
  if (const char* env = std::getenv("SIM_FEATURES")) {
    features.clear();
    std::stringstream ss(env);
    std::string f;
    while (std::getline(ss, f, ',')) {
      if (!f.empty()) features.push_back(f);
    }
  }
  return {{"name", "sim"},
          {"version", "1.0-test-double"},
          {"backends", Backends()},
          {"features", features}};
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) Die("usage: sandcheck-sim-adapter OP < request.json", 2);
  std::string op = argv[1];
  std::set<std::string> faults = Faults();
  if (faults.count("hang@" + op)) {
    // Also a child in the same process group, to prove the harness kills the whole group.
    if (::fork() == 0) {
      while (true) ::pause();
    }
    while (true) ::pause();
  }
  if (faults.count("garbage@" + op)) {
    std::cout << "this is not json {\n";
    return 0;
  }
  if (faults.count("exit@" + op)) Die("simulated failure of " + op, 3);
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  json in = json::parse(input, nullptr, false);
  if (in.is_discarded() || !in.is_object()) Die("stdin is not a JSON object", 2);
  auto t0 = std::chrono::steady_clock::now();
  json out;
  if (op == "info") {
    out = Info(faults);
  } else if (op == "create") {
    std::vector<std::string> backends = Backends();
    auto offered = [&](const std::string& b) {
      return std::find(backends.begin(), backends.end(), b) != backends.end();
    };
    std::string backend = in.value("backend", backends.front());
    if (!offered(backend)) {  // FAIL-1, SEL-5: no worker here can provision it
      std::cout << json{{"error",
                         {{"code", "sandbox_unavailable"},
                          {"message", "backend " + backend + " is not offered"}}}}
                << "\n";
      Die("backend " + backend + " is not offered");
    }
    // SEL-6: untrusted or unverified code runs on gvisor or microvm, or not at all.
    std::string trust = in.value("trust", "first_party");
    if ((trust == "untrusted" || trust == "unverified") && backend != "gvisor" &&
        backend != "microvm" && !faults.count("trust-ignored")) {
      if (offered("gvisor")) {
        backend = "gvisor";
      } else if (offered("microvm")) {
        backend = "microvm";
      } else {
        std::cout << json{{"error",
                           {{"code", "sandbox_unavailable"},
                            {"message", "untrusted code needs gvisor or microvm"}}}}
                         .dump()
                  << "\n";
        return 1;
      }
    }
    in["backend"] = backend;
    std::random_device rd;
    char id[32];
    std::snprintf(id, sizeof id, "sim-%08x", rd());
    std::string dir = StateDir() + "/" + id;
    fs::create_directories(dir + "/work");
    fs::create_directories(dir + "/root/tmp");
    if (faults.count("secrets-on-disk") && in.contains("secrets")) {
      fs::create_directories(dir + "/root/run");
      std::string text;
      for (const auto& [k, v] : in["secrets"].items())
        text += k + "=" + v.get<std::string>() + "\n";
      Spit(dir + "/root/run/secrets.env", text);
    }
    if (faults.count("secrets-leak-across") && in.contains("secrets")) {
      std::ofstream leak(StateDir() + "/leaked-secrets.env", std::ios::app);
      for (const auto& [k, v] : in["secrets"].items())
        leak << k << "=" << v.get<std::string>() << "\n";
    }
    bool wants_egress = in.contains("egress") && in["egress"].is_object() &&
                        !in["egress"].value("rules", json::array()).empty();
    const bool calibration =  // the six tasks' CPU calibration: the same request, no CPU limit
        !in.value("limits", json::object()).contains("cpu_millicores");
    if (faults.count("flaky-network") && wants_egress && !calibration) {
      // Every second sandbox that asks for egress made in this state directory has no network
      // (--repeat tests; the CPU calibration's sandbox is not counted).
      std::string counter = StateDir() + "/flaky-network-count";
      long n = std::atol(Slurp(counter).c_str()) + 1;
      Spit(counter, std::to_string(n));
      if (n % 2 == 0) Spit(dir + "/faults", "no-network");
    }
    Spit(dir + "/spec.json", in.dump());
    Spit(dir + "/state", "RUNNING");
    Spit(dir + "/gateway.jsonl", "");
    out = {{"sandbox", id}};
  } else if (op == "exec") {
    // NOT a defect: every exec costs 0.7 s of the runtime's own before the command runs (a
    // runtime that boots or attaches per call); the CPU cap is judged on the command's own time.
    if (faults.count("slow-exec")) std::this_thread::sleep_for(std::chrono::milliseconds(700));
    sim::Sandbox sb = Load(in, faults);
    std::string cmd = in.value("cmd", "");
    double timeout = in.value("timeout_s", 20.0);
    sim::ExecOut r;
    if (sb.crashed) {
      r = {"sandbox_unavailable", "CRASHED", -1, "", "the sandbox crashed; revert it\n"};
    } else {
      r = sim::Interpret(sb, cmd, timeout);
      if (r.state == "CRASHED") Spit(sb.dir + "/state", "CRASHED");
    }
    if (faults.count("no-diagnostics")) r.err.clear();
    out = {{"status", r.status},
           {"state", r.state},
           {"exit", r.exit},
           {"stdout", r.out},
           {"stderr", r.err},
           {"seconds", Seconds(t0)},
           {"backend", sb.spec.value("backend", "sim")}};
    if (!faults.count("no-stages")) {
      double s = faults.count("fake-stages") ? 0.0 : Seconds(t0);
      out["stages"] = {{"allocate", 0.0}, {"initialize", 0.0}, {"inject_context", 0.0},
                       {"execute", s},    {"collect", 0.0},    {"destroy", -1.0},
                       {"cleanup", -1.0}};
    }
  } else if (op == "revert") {
    sim::Sandbox sb = Load(in, faults);
    if (faults.count("partial-revert") && !sb.crashed) {
      // Only the visible files of /work go (what the six tasks leave); hidden ones, /tmp and
      // the processes stay.
      for (const auto& e : fs::directory_iterator(sb.work)) {
        if (e.path().filename().string()[0] != '.') fs::remove_all(e.path());
      }
    } else if (!faults.count("never-revert")) {
      fs::remove_all(sb.work);
      fs::create_directories(sb.work);
      fs::remove_all(sb.dir + "/root/tmp");
      fs::create_directories(sb.dir + "/root/tmp");
      sim::KillOrphans(sb);
      fs::remove(sb.dir + "/procs");
      if (!faults.count("disk-not-reclaimed")) fs::remove(sb.dir + "/disk_used");
      fs::remove(sb.dir + "/mem_held");  // the holders were the sandbox's processes
    }
    Spit(sb.dir + "/state", "RUNNING");
    out = {{"seconds", Seconds(t0)}};
  } else if (op == "destroy") {
    sim::Sandbox sb = Load(in, faults);
    if (!faults.count("destroy-leaves-processes")) sim::KillOrphans(sb);
    fs::remove_all(sb.dir);
    out = {{"seconds", Seconds(t0)}};
  } else if (op == "gateway_log") {
    json info = Info(faults);
    bool offered = false;
    for (const auto& f : info["features"]) offered = offered || f == "egress.log";
    if (!offered) return 64;
    sim::Sandbox sb = Load(in, faults);
    json decisions = json::array();
    std::stringstream ss(Slurp(sb.dir + "/gateway.jsonl"));
    std::string line;
    while (std::getline(ss, line)) {
      if (!line.empty()) decisions.push_back(json::parse(line));
    }
    out = {{"decisions", decisions}};
  } else {
    return 64;
  }
  std::cout << out.dump() << "\n";
  return 0;
}
