"""End-to-end tests of the third-party runtime adapters (conformance/adapters, docs/adapters.md).

Each adapter binary (build/bin/sandcheck-adapter-{bwrap,runc,crun,runsc}) is driven exactly as
sandcheck drives it: `ADAPTER OP` with one JSON object on stdin, one on stdout (adapter
protocol v1). Every test runs the real runtime and checks the outcome from outside as well
(files on the host, cgroups, the runtime's own `list`, the process table, the mount table),
and every test asserts that it left nothing behind.

Environment: SBX_BUILD (default: build/), root. A runtime that is not installed is skipped with
the reason, unless SBX_ADAPTERS_MUST_WORK=1 (CI), which turns the skip into a failure.
Latency figures (docs/adapters.md): SBX_ADAPTER_SAMPLES runs each (default 5; 20 for the docs);
the figures are written to $SBX_BUILD/adapters-latency.json.
"""

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SBX_BUILD", ROOT / "build"))
STATE = Path(os.environ.get("SANDCHECK_ADAPTER_STATE", "/run/sandcheck-adapters"))
ADAPTERS = ["bwrap", "runc", "crun", "runsc"]
RUNTIME_BINARY = {"bwrap": "bwrap", "runc": "runc", "crun": "crun", "runsc": "runsc"}
KNOWN_FEATURES = {"egress", "revert", "suspend", "destroy", "limits.cpu", "limits.memory",
                  "limits.pids", "limits.disk", "limits.fds", "timeout", "tenants", "trust",
                  "pool", "secrets", "files"}
MIB = 1 << 20
CALL_TIMEOUT = 120


def adapter_path(name):
    return BUILD / "bin" / f"sandcheck-adapter-{name}"


def call(name, op, request=None, *, raw=None, timeout=CALL_TIMEOUT):
    """Runs one adapter op; returns (exit code, parsed stdout or None, stderr)."""
    data = raw if raw is not None else json.dumps(request if request is not None else {})
    p = subprocess.run([str(adapter_path(name)), op], input=data.encode(), capture_output=True,
                       timeout=timeout)
    try:
        out = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        out = None
    return p.returncode, out, p.stderr.decode(errors="replace")


def ok(name, op, request=None, **kw):
    rc, out, err = call(name, op, request, **kw)
    assert rc == 0, f"{name} {op} {request}: exit {rc}: {out} {err}"
    return out


class Sandbox:
    def __init__(self, adapter, **create):
        self.adapter = adapter
        self.id = ok(adapter, "create", {"template": "sandbox", **create})["sandbox"]
        self.destroyed = False

    def exec(self, cmd, timeout_s=20):
        return ok(self.adapter, "exec", {"sandbox": self.id, "cmd": cmd, "timeout_s": timeout_s})

    def revert(self):
        return ok(self.adapter, "revert", {"sandbox": self.id})

    def destroy(self):
        if not self.destroyed:
            self.destroyed = True
            return ok(self.adapter, "destroy", {"sandbox": self.id})
        return None

    @property
    def dir(self):
        return STATE / self.adapter / self.id


# ---- leak accounting: what an adapter could leave behind -------------------------------------

def runtime_containers(name):
    """Container ids the runtime still knows about (sandcheck's only)."""
    binary = RUNTIME_BINARY[name]
    if name == "bwrap":
        return set()
    p = subprocess.run([binary, "list", "--quiet"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{binary} list: {p.stderr}"
    return {line.strip() for line in p.stdout.splitlines() if line.startswith("sandcheck-")}


def own_cgroup_children(name):
    """The adapter's cgroups (sandcheck-NAME-*) below this process's own cgroup, in every
    mounted hierarchy."""
    found = set()
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        fstype = right.split()[0]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        f = left.split()
        opts = right.split()[2].split(",") if len(right.split()) > 2 else []
        mounts[f[4]] = (fstype, f[3], opts)
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for mp, (fstype, root, opts) in mounts.items():
            if (not ctrls and fstype == "cgroup2") or (
                    ctrls and fstype == "cgroup" and all(c in opts for c in ctrls.split(","))):
                rel = path[len(root):] if root != "/" and path.startswith(root) else path
                d = Path(mp + rel)
                if d.is_dir():
                    found |= {str(c) for c in d.iterdir()
                              if c.is_dir() and c.name.startswith(f"sandcheck-{name}-")}
    return found


def sandcheck_processes():
    """Host processes that belong to an adapter's sandbox (runtime shims, gVisor, bwrap)."""
    procs = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "sandcheck-adapters" in cmd or re.search(r"sandcheck-(runc|crun|runsc)-[0-9a-f]{16}", cmd) \
                or "sbx-leak-marker" in cmd:
            procs.add((int(p.name), cmd))
    return procs


def sandcheck_mounts():
    return {line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if "sandcheck-adapters" in line}


def snapshot(name):
    state = STATE / name
    dirs = {d.name for d in state.iterdir()} if state.is_dir() else set()
    return {"containers": runtime_containers(name), "state_dirs": dirs,
            "cgroups": own_cgroup_children(name), "processes": sandcheck_processes(),
            "mounts": sandcheck_mounts()}


def wait_for_no_processes(timeout=30.0):
    """Waits until no sandbox process is left (returns at once then; a leak waits it out)."""
    deadline = time.monotonic() + timeout
    while sandcheck_processes() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture(params=ADAPTERS)
def adapter(request):
    """An adapter whose runtime is installed; asserts that the test leaked nothing."""
    name = request.param
    if not adapter_path(name).exists():
        pytest.fail(f"{adapter_path(name)} is not built (target sandcheck_adapters)")
    if shutil.which(RUNTIME_BINARY[name]) is None:
        msg = f"{RUNTIME_BINARY[name]} is not installed (apt-get install {RUNTIME_BINARY[name]})"
        if os.environ.get("SBX_ADAPTERS_MUST_WORK") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    before = snapshot(name)
    yield name
    wait_for_no_processes()
    after = snapshot(name)
    for key in before:
        leaked = after[key] - before[key]
        assert not leaked, f"{name} left {key} behind: {sorted(leaked)}"


@pytest.fixture
def sandboxes():
    made = []
    yield made
    for s in made:
        s.destroy()


def features(name):
    return set(ok(name, "info")["features"])


def wait_for_file(path, timeout=60.0):
    """Waits until `path` exists (a command in the sandbox wrote it into /work)."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


# ---- info -------------------------------------------------------------------------------------

def test_info_declares_only_known_features_and_explains_the_rest(adapter):
    info = ok(adapter, "info")
    assert info["name"] == adapter
    assert re.search(r"\d", info["version"]), info["version"]
    assert info["backends"]
    declared = set(info["features"])
    assert declared <= KNOWN_FEATURES, declared - KNOWN_FEATURES
    assert {"revert", "destroy", "timeout"} <= declared
    missing = KNOWN_FEATURES - declared
    assert set(info["unsupported"]) == missing, "every missing feature needs a reason"
    assert all(len(reason) > 10 for reason in info["unsupported"].values())
    # None of these adapters has an egress gateway: claiming one would be a lie.
    assert "egress" not in declared
    if adapter == "bwrap":
        assert not declared & {"limits.cpu", "limits.memory", "limits.pids"}


# ---- lifecycle ---------------------------------------------------------------------------------

def test_exec_revert_destroy(adapter, sandboxes):
    s = Sandbox(adapter)
    sandboxes.append(s)
    r = s.exec("echo hi > /work/f; cat /work/f; pwd")
    assert (r["status"], r["state"], r["exit"]) == ("ok", "RUNNING", 0)
    assert r["stdout"] == "hi\n/work\n"
    assert r["seconds"] >= 0
    # State kept between execs: /work only.
    assert s.exec("ls /work")["stdout"] == "f\n"
    host_file = s.dir / "work" / "f"
    assert host_file.read_text() == "hi\n"
    assert host_file.stat().st_uid == 1000
    rv = s.revert()
    assert rv["seconds"] >= 0
    r = s.exec("ls -A /work | wc -l")
    assert r["stdout"].strip() == "0"  # SCN-7
    s.destroy()
    assert not s.dir.exists()  # FS-4
    rc, out, _ = call(adapter, "exec", {"sandbox": s.id, "cmd": "true"})
    assert rc == 2 and out["error"]["code"] == "not_found"


def test_exit_status_and_streams(adapter, sandboxes):
    s = Sandbox(adapter)
    sandboxes.append(s)
    r = s.exec("echo out; echo err >&2; exit 7")
    assert (r["status"], r["exit"], r["stdout"], r["stderr"]) == ("ok", 7, "out\n", "err\n")
    # A command killed by a signal: the shell convention, 128 + signal.
    r = s.exec("sh -c 'kill -9 $$'; exit $?")
    assert r["status"] == "ok" and r["exit"] == 137, r
    assert s.exec("true")["state"] == "RUNNING"


def test_env_is_passed(adapter, sandboxes):
    s = Sandbox(adapter, env={"SBX_GREETING": "hello there"})
    sandboxes.append(s)
    assert s.exec('echo "$SBX_GREETING"')["stdout"] == "hello there\n"


# ---- isolation ---------------------------------------------------------------------------------

def test_isolation_from_outside(adapter, sandboxes):
    s = Sandbox(adapter)
    sandboxes.append(s)
    r = s.exec("id -u; hostname; ls /proc | grep -c '^[0-9]'")
    uid, hostname, nprocs = r["stdout"].split()
    assert uid == "1000"
    assert hostname == "sandbox"
    assert int(nprocs) < 10, "PID namespace: host processes are visible"  # FS-3
    # FS-2: the root is read-only; FS-1: only /work (and a private /tmp) is writable.
    r = s.exec("touch /etc/sbx-escape 2>&1; echo rc=$?; touch /tmp/t && echo tmp-ok")
    assert "rc=0" not in r["stdout"] and "tmp-ok" in r["stdout"]
    assert not (s.dir / "rootfs" / "etc" / "sbx-escape").exists()
    # No network but loopback (no egress gateway, so nothing at all).
    r = s.exec("ip -o link | awk -F': ' '{print $2}'")
    assert r["stdout"].split() == ["lo"], r
    # Host paths are not there.
    r = s.exec(f"ls {ROOT} 2>&1; ls /run/sandcheck-adapters 2>&1")
    assert "CMakeLists.txt" not in r["stdout"]
    # Processes started by a command do not outlive it.
    s.exec("sleep 60 & echo started", timeout_s=10)
    r = s.exec("ps -o comm | grep -cx sleep || true")
    assert r["stdout"].strip() == "0"


def test_two_sandboxes_do_not_see_each_other(adapter, sandboxes):
    a, b = Sandbox(adapter), Sandbox(adapter)
    sandboxes += [a, b]
    a.exec("echo secret-a > /work/a")
    r = b.exec("ls -A /work; cat /work/a 2>&1 || true")
    assert "secret-a" not in r["stdout"]


# ---- limits ------------------------------------------------------------------------------------

def test_timeout_kills_everything_and_sandbox_survives(adapter, sandboxes):
    s = Sandbox(adapter)
    sandboxes.append(s)
    start = time.monotonic()
    r = s.exec("sleep 77.5 & sleep 78.5", timeout_s=1)
    elapsed = time.monotonic() - start
    assert r["status"] == "timeout" and r["state"] == "RUNNING"
    assert elapsed < 60, elapsed  # the 78 s sleep did not run out (kill, not wait)
    # Nothing of the command is left on the host (killed processes take a moment to go; a
    # survivor never does).
    wait_for_no_processes()
    deadline = time.monotonic() + 30
    while True:
        host = subprocess.run(["pgrep", "-f", "sleep 7[78].5"], capture_output=True, text=True)
        if host.stdout == "" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert host.stdout == "", host.stdout
    assert s.exec("echo alive")["stdout"] == "alive\n"


def test_memory_limit(adapter, sandboxes):
    s = Sandbox(adapter, limits={"memory_bytes": 256 * MIB})
    sandboxes.append(s)
    s.exec("echo before > /work/x")
    r = s.exec("sbx-memhog 640; echo shell-survived", timeout_s=60)
    if "limits.memory" not in features(adapter):
        # Honest outcome of an adapter with no memory limit: the allocation succeeds.
        assert r["status"] == "ok" and "done 640 MiB" in r["stdout"], r
        return
    # SCN-6, RES-2, RES-8, FAIL-3: killed, reported as such, and the WHOLE sandbox ended
    # (cgroup v1 kills one process; the shell must not carry on).
    assert (r["status"], r["state"]) == ("resource_exceeded", "CRASHED"), r
    assert "done 640 MiB" not in r["stdout"] and "shell-survived" not in r["stdout"]
    u = s.exec("echo hi")
    assert (u["status"], u["state"]) == ("sandbox_unavailable", "CRASHED")
    s.revert()
    r = s.exec("ls -A /work | wc -l; sbx-memhog 64")
    assert r["status"] == "ok" and r["stdout"].startswith("0\n") and "done 64 MiB" in r["stdout"]


def cpu_wall(sandbox, millions):
    """Wall seconds of fixed work (sbx-cpu), the better of two runs (the machine is shared)."""
    best = None
    for _ in range(2):
        r = sandbox.exec(f"sbx-cpu -n {millions}", timeout_s=120)
        assert r["status"] == "ok", r
        wall = float(r["stdout"].split()[1])
        best = wall if best is None else min(best, wall)
    return best


def test_cpu_limit_is_a_hard_cap(adapter, sandboxes):
    if "limits.cpu" not in features(adapter):
        pytest.skip(f"{adapter} declares no limits.cpu")
    # RES-1: wall time of fixed work against an unthrottled run of the same work in the same
    # test (never in-sandbox CPU time). 100 millicores rather than the scenario's 500 so that
    # the verdict survives a loaded machine: a 10 % cap is far below any share a free run gets
    # here, while at 500 m a busy 2-core host already gives an unthrottled run about half a core.
    free = Sandbox(adapter)
    capped = Sandbox(adapter, limits={"cpu_millicores": 100})
    sandboxes += [free, capped]
    base = cpu_wall(free, 100)
    slow = cpu_wall(capped, 100)
    assert slow / base > 2.5, f"100m: {slow:.2f} s vs unthrottled {base:.2f} s"


def test_limits_are_written_to_the_host_cgroups(adapter, sandboxes):
    """RES-1/2/4 verified from outside (as runtime-tools does): while a command runs, the
    container's cgroup files hold exactly the limits asked for."""
    declared = features(adapter) & {"limits.cpu", "limits.memory", "limits.pids"}
    if not declared:
        pytest.skip(f"{adapter} declares no cgroup limits")
    s = Sandbox(adapter, limits={"cpu_millicores": 250, "memory_bytes": 200 * MIB, "pids": 90})
    sandboxes.append(s)
    p = subprocess.Popen([str(adapter_path(adapter)), "exec"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The command runs until the host has looked (it puts a file into /work), at most 60 s: the
    # window in which the container's cgroup exists never closes before the check is done.
    go = s.dir / "work" / "sbx-go"
    cmd = "i=0; while [ ! -e /work/sbx-go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
    p.stdin.write(json.dumps({"sandbox": s.id, "cmd": cmd, "timeout_s": 90}).encode())
    p.stdin.close()
    wanted = {"cpu.cfs_quota_us": "25000", "cpu.cfs_period_us": "100000",
              "memory.limit_in_bytes": str(200 * MIB), "pids.max": "90"}
    seen = {}
    deadline = time.monotonic() + 45
    # Until every file holds what was asked: the runtime creates the cgroup (with the kernel's
    # defaults in it) before it writes the limits, so a first read may see -1 / max; a limit
    # never written keeps the defaults until the deadline.
    while seen != wanted and time.monotonic() < deadline:
        for d in own_cgroup_children(adapter):
            if s.id not in d:
                continue
            for f, v in wanted.items():
                path = Path(d) / f
                if path.exists():
                    seen[f] = path.read_text().strip()
        time.sleep(0.1)
    go.write_text("")
    out = json.loads(p.stdout.read())
    p.wait(timeout=30)
    p.stderr.close()
    assert out["status"] == "ok", out
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.skip("cgroup v2 host: v1 file names checked only")  # names differ (cpu.max, ...)
    assert seen == wanted


def test_pids_limit(adapter, sandboxes):
    # runsc: pids.max counts gVisor's own host threads too (about 50 before any guest process).
    limit = 64 if adapter == "runsc" else 24
    s = Sandbox(adapter, limits={"pids": limit})
    sandboxes.append(s)
    assert s.exec("echo fine")["stdout"] == "fine\n"
    r = s.exec("i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done; echo started=$i",
               timeout_s=30)
    if "limits.pids" not in features(adapter):
        assert "started=200" in r["stdout"], r
        return
    # RES-4, RES-8, PROD-2: the fork bomb is stopped, reported, and ends the sandbox.
    assert "started=200" not in r["stdout"], r
    assert (r["status"], r["state"]) == ("resource_exceeded", "CRASHED"), r
    assert s.exec("true")["status"] == "sandbox_unavailable"
    s.revert()
    assert s.exec("echo back")["stdout"] == "back\n"


def test_fds_limit(adapter, sandboxes):
    assert "limits.fds" in features(adapter)
    s = Sandbox(adapter, limits={"fds": 77})
    sandboxes.append(s)
    assert s.exec("ulimit -n")["stdout"].strip() == "77"  # RES-6


# ---- files ------------------------------------------------------------------------------------

def test_put_file_is_confined_to_work(adapter, sandboxes):
    s = Sandbox(adapter)
    sandboxes.append(s)
    content = b"#!/bin/sh\necho from put_file\n"
    ok(adapter, "put_file", {"sandbox": s.id, "path": "/work/bin/tool.sh",
                             "content_b64": base64.b64encode(content).decode(), "mode": 0o755})
    assert s.exec("/work/bin/tool.sh")["stdout"] == "from put_file\n"
    # A symlink planted by the sandbox must not lead the (root) adapter out of /work.
    s.exec("ln -s /etc /work/evil; ln -s /etc/passwd /work/pw")
    for path in ("/work/evil/sbx-pwned", "/work/pw", "/etc/passwd", "/work/../x"):
        rc, out, _ = call(adapter, "put_file", {"sandbox": s.id, "path": path,
                                                "content_b64": "eA=="})
        assert rc != 0, (path, out)
    assert not Path("/etc/sbx-pwned").exists()
    assert not (s.dir / "rootfs" / "etc" / "sbx-pwned").exists()
    # Revert must not follow them either.
    s.revert()
    assert Path("/etc/passwd").exists() and (s.dir / "rootfs" / "etc" / "passwd").exists()


# ---- protocol errors ----------------------------------------------------------------------------

def test_protocol_errors(adapter):
    rc, out, _ = call(adapter, "frobnicate")
    assert rc == 64 and out["error"]["code"] == "unsupported"
    rc, out, _ = call(adapter, "exec", raw="{not json")
    assert rc == 2 and out["error"]["code"] == "invalid_argument"
    rc, out, _ = call(adapter, "create", {"template": "sandbox", "colour": "blue"})
    assert rc == 2 and "colour" in out["error"]["message"]
    rc, out, _ = call(adapter, "create", {"limits": {"memory_bytes": "lots"}})
    assert rc == 2
    rc, out, _ = call(adapter, "exec", {"sandbox": "../../etc", "cmd": "true"})
    assert rc == 2
    rc, out, _ = call(adapter, "create", {"template": "../refs/sandbox"})
    assert rc == 2
    # A backend the adapter lacks: the spec's provisioning failure (FAIL-1, SEL-5).
    rc, out, _ = call(adapter, "create", {"backend": "microvm"})
    assert rc == 1 and out["error"]["code"] == "sandbox_unavailable"


# ---- the adapter itself dies -------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_adapter_killed_mid_exec_leaves_nothing_after_destroy(adapter, sandboxes, sig):
    s = Sandbox(adapter)
    sandboxes.append(s)
    p = subprocess.Popen([str(adapter_path(adapter)), "exec"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(json.dumps({"sandbox": s.id, "cmd": "echo sbx-leak-marker; touch /work/started; "
                                                     "sleep 300", "timeout_s": 600}).encode())
    p.stdin.close()
    # Mid-exec for certain: the command is running (it said so through /work).
    assert wait_for_file(s.dir / "work" / "started"), "the command never started"
    p.send_signal(sig)
    p.wait(timeout=30)
    assert p.returncode != 0  # an interrupted op is an adapter failure, never a verdict
    said = p.stderr.read().decode(errors="replace")[-2000:]  # why, if the check below fails
    p.stdout.close()
    p.stderr.close()
    if sig == signal.SIGTERM:
        # A stopped adapter cleans up after itself.
        wait_for_no_processes(10)
        left = {c for c in runtime_containers(adapter) if s.id in c}
        assert not left, f"exit {p.returncode}; the adapter said:\n{said}"
    # After SIGKILL, an OCI container may still run: destroy must end it.
    s.destroy()
    wait_for_no_processes(10)
    assert not {c for c in runtime_containers(adapter) if s.id in c}
    assert not [p for p in sandcheck_processes() if "sleep 300" in p[1]]


# ---- latency (docs/adapters.md) ------------------------------------------------------------------

def percentile(samples, q):
    xs = sorted(samples)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def test_latency(adapter):
    n = int(os.environ.get("SBX_ADAPTER_SAMPLES", "5"))
    cold, warm, revert = [], [], []
    for _ in range(n):
        t0 = time.monotonic()
        s = Sandbox(adapter)
        r = s.exec("true")
        cold.append(time.monotonic() - t0)
        assert r["status"] == "ok"
        for _ in range(2):
            t0 = time.monotonic()
            assert s.exec("true")["status"] == "ok"
            warm.append(time.monotonic() - t0)
        t0 = time.monotonic()
        s.revert()
        revert.append(time.monotonic() - t0)
        s.destroy()
    figures = {name: {"n": len(xs), "p50": percentile(xs, 0.5), "p95": percentile(xs, 0.95),
                      "samples": xs}
               for name, xs in (("create_plus_first_exec", cold), ("exec", warm),
                                ("revert", revert))}
    out = BUILD / "adapters-latency.json"
    data = json.loads(out.read_text()) if out.exists() else {}
    data[adapter] = figures
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"\n{adapter}: " + ", ".join(f"{k} p50 {v['p50'] * 1000:.0f} ms p95 {v['p95'] * 1000:.0f} ms"
                                        for k, v in figures.items()))
    # A cold start includes unpacking and verifying the image: it cannot be cheaper than an exec.
    # Compared by the best sample of each (interleaved above): noise only ever adds time.
    assert min(cold) > min(warm), (cold, warm)


def test_runsc_sandbox_crash_is_a_tool_error(sandboxes):
    """FAIL-2: gVisor's sandbox process dying under the command is the sandbox crashing, not the
    command's exit status."""
    if shutil.which("runsc") is None or not adapter_path("runsc").exists():
        pytest.skip("runsc not installed or adapter not built")
    s = Sandbox("runsc")
    sandboxes.append(s)
    p = subprocess.Popen([str(adapter_path("runsc")), "exec"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(json.dumps({"sandbox": s.id, "cmd": "touch /work/started; sleep 30",
                              "timeout_s": 60}).encode())
    p.stdin.close()
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline:
        for pid, cmd in sandcheck_processes():
            if cmd.startswith("runsc-sandbox") and f"sandcheck-runsc-{s.id}" in cmd:
                victim = pid
        time.sleep(0.1)
    assert victim, "no runsc-sandbox process found"
    # The command is running in it (not still starting): kill the sandbox under it.
    assert wait_for_file(s.dir / "work" / "started"), "the command never started"
    os.kill(victim, signal.SIGKILL)
    out = json.loads(p.stdout.read())
    p.wait(timeout=30)
    p.stderr.close()
    assert p.returncode == 0
    assert (out["status"], out["state"]) == ("tool_error", "CRASHED"), out
    assert s.exec("true")["status"] == "sandbox_unavailable"
    s.revert()
    assert s.exec("echo up")["stdout"] == "up\n"
