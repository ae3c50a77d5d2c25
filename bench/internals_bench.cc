// sbx-bench-internals: Google Benchmark micro-benchmarks of the runtime's hot paths below the
// public API (bench/ may link the internal libraries sbx_host and sbx_net):
//   cgroup create+destroy, cgroup attach (move a process between two cgroups), seccomp filter
//   compile (once per runtime) and load in a forked child (against a bare fork as baseline),
//   a network namespace from the egress pool (Attach: take a ready namespace, register the
//   policy), the gateway's DNS answer (allowed / NXDOMAIN), and the proxy's decision on an
//   HTTP request (allowed / refused), with the head parse.
// The overlay reset is a step of Revert and is measured through it (sbx-bench-lifecycle
// BM_Revert): it has no API of its own.
//
// Kernel benchmarks need root; without it they are skipped with an error message and the pure
// ones still run.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "host/cgroup.h"
#include "host/seccomp.h"
#include "net/dns_message.h"
#include "net/dns_query_testing.h"
#include "net/egress.h"
#include "net/gateway_decide.h"
#include "net/http_head.h"
#include "net/policy_index.h"

namespace {

constexpr const char* kMirror = "pkg-mirror.demo-tools.svc.cluster.local";

bool Root(benchmark::State& state) {
  if (geteuid() == 0) return true;
  state.SkipWithError("needs root (LOUD SKIP)");
  return false;
}

std::string BenchId() { return "bench-" + std::to_string(getpid()); }

sbx::host::CgroupManager* Cgroups(benchmark::State& state) {
  static std::unique_ptr<sbx::host::CgroupManager> mgr = [] {
    auto m = sbx::host::CgroupManager::Open(BenchId());
    return m.ok() ? std::move(*m) : nullptr;
  }();
  if (!mgr) state.SkipWithError("CgroupManager::Open failed");
  return mgr.get();
}

// RES-1..RES-4: a sandbox cgroup in every hierarchy, then its removal.
void BM_CgroupCreateDestroy(benchmark::State& state) {
  if (!Root(state)) return;
  auto* mgr = Cgroups(state);
  if (!mgr) return;
  int i = 0;
  for (auto _ : state) {
    auto cg = mgr->Create("c" + std::to_string(i++));
    if (!cg.ok()) return state.SkipWithError(cg.status().ToString().c_str());
    cg->reset();  // kill what is left (nothing) and rmdir in every hierarchy
  }
}
BENCHMARK(BM_CgroupCreateDestroy)->Unit(benchmark::kMicrosecond)->UseRealTime();

// LC-3: moving a process into a cgroup (every hierarchy), alternating between two.
void BM_CgroupAttach(benchmark::State& state) {
  if (!Root(state)) return;
  auto* mgr = Cgroups(state);
  if (!mgr) return;
  auto a = mgr->Create("attach-a");
  auto b = mgr->Create("attach-b");
  if (!a.ok() || !b.ok()) return state.SkipWithError("create failed");
  pid_t child = fork();
  if (child == 0) {
    for (;;) pause();
  }
  bool flip = false;
  for (auto _ : state) {
    sbx::Status st = (flip ? *b : *a)->Attach(child);
    flip = !flip;
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}
BENCHMARK(BM_CgroupAttach)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Once per runtime: building the deny-list with libseccomp and exporting BPF.
void BM_SeccompCompile(benchmark::State& state) {
  for (auto _ : state) {
    auto f = sbx::host::SeccompFilter::Compile();
    if (!f.ok()) return state.SkipWithError(f.status().ToString().c_str());
    benchmark::DoNotOptimize(f->program().size());
  }
}
BENCHMARK(BM_SeccompCompile)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The baseline of the next one: fork, _exit, wait.
void BM_ForkExitWait(benchmark::State& state) {
  for (auto _ : state) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, nullptr, 0);
  }
}
BENCHMARK(BM_ForkExitWait)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Per sandbox: loading the precompiled filter in the child (its cost = this − the baseline).
void BM_SeccompLoadInChild(benchmark::State& state) {
  auto f = sbx::host::SeccompFilter::Compile();
  if (!f.ok()) return state.SkipWithError(f.status().ToString().c_str());
  for (auto _ : state) {
    pid_t p = fork();
    if (p == 0) _exit(f->LoadInChild() == 0 ? 0 : 1);
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return state.SkipWithError("load failed");
  }
}
BENCHMARK(BM_SeccompLoadInChild)->Unit(benchmark::kMicrosecond)->UseRealTime();

// RES-7, LC-2: a sandbox network from the egress pool — take a ready namespace and register
// the policy. The release and the pool's refill are waited for off the clock.
void BM_EgressAttachFromPool(benchmark::State& state) {
  if (!Root(state)) return;
  static std::unique_ptr<sbx::net::EgressService> egress = [] {
    auto e = sbx::net::EgressService::Start({.runtime_id = BenchId(), .pool_floor = 4});
    return e.ok() ? std::move(*e) : nullptr;
  }();
  if (!egress) return state.SkipWithError("EgressService::Start failed");
  sbx::EgressPolicy policy;
  policy.rules.push_back({"http", {kMirror}, {80}});
  std::map<std::string, std::string> hosts = {{kMirror, "127.0.0.1:8080"}};
  int i = 0;
  // The pool refills one namespace in a few ms: a fixed pause, off the clock. (Not by polling
  // Stats(): its link dump shares the gateway's netlink socket with the pool's creator and
  // would slow the very refill it waits for.)
  auto wait_pool = [] { std::this_thread::sleep_for(std::chrono::milliseconds(25)); };
  wait_pool();
  for (auto _ : state) {
    auto a = egress->Attach("bench-" + std::to_string(i++), policy, hosts);
    if (!a.ok()) return state.SkipWithError(a.status().ToString().c_str());
    state.PauseTiming();
    a->reset();
    wait_pool();
    state.ResumeTiming();
  }
}
// Fixed iterations: the paused refill wait (25 ms) is not counted towards --benchmark_min_time.
BENCHMARK(BM_EgressAttachFromPool)->Unit(benchmark::kMicrosecond)->UseRealTime()->Iterations(100);

// EGR-2: the gateway's DNS answer for an allowed name (A record) and for any other (NXDOMAIN).
void BM_DnsAnswer(benchmark::State& state, bool allowed_name) {
  std::string q = sbx::net::testing_dns::Query(0x1234, allowed_name ? kMirror : "example.com", 1);
  auto allowed = [](std::string_view n) { return n == kMirror; };
  uint32_t addr = inet_addr(sbx::net::kGatewayAddress);
  for (auto _ : state) {
    auto out = sbx::net::AnswerDnsQuery(q, allowed, addr, false);
    benchmark::DoNotOptimize(out.reply.data());
  }
}
BENCHMARK_CAPTURE(BM_DnsAnswer, allowed, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DnsAnswer, nxdomain, false)->Unit(benchmark::kMicrosecond);

// EGR-1, EGR-3: the proxy's verdict on an HTTP request head (parse + decide).
void BM_GatewayDecision(benchmark::State& state, const char* host) {
  sbx::EgressPolicy policy;
  policy.rules.push_back({"http", {kMirror}, {80}});
  sbx::net::PolicyIndex index(policy, {{kMirror, "127.0.0.1:8080"}});
  std::string req = std::string("GET /hello-1.0.txt HTTP/1.1\r\nHost: ") + host +
                    "\r\nUser-Agent: Wget\r\nConnection: close\r\n\r\n";
  uint32_t gw = inet_addr(sbx::net::kGatewayAddress);
  bool expect = std::string(host) == kMirror;
  for (auto _ : state) {
    sbx::net::HttpRequestHead head;
    if (sbx::net::ParseHttpRequestHead(req, &head) != sbx::net::HttpHeadStatus::kComplete)
      return state.SkipWithError("parse failed");
    auto v = sbx::net::DecideHttp(head, gw, 80, gw, &index);
    if (v.allow != expect) return state.SkipWithError("unexpected verdict");
    benchmark::DoNotOptimize(v.allow);
  }
}
BENCHMARK_CAPTURE(BM_GatewayDecision, allowed, kMirror)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GatewayDecision, refused_other_host, "example.com")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_GatewayDecision, refused_ip_literal, "203.0.113.7")
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
