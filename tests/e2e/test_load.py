"""Under load and faults (issue 17, docs/load.md): `sandcheck run --scenario load` against the
reference runtime in process and against a real sandboxd at concurrency 32 loses nothing,
crosses nothing and leaks nothing; sandboxd's descriptors stay bounded while it runs; kill -9 of
sandboxd at random points of a load run leaves clients with a clear error and the restarted
daemon reclaims every orphan within a second (NFR-5)."""
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import BUILD, run

TOKEN = "loadtest-token-0123456789abcdef"


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("sandboxd", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Daemon:
    """sandboxd with the issue's configuration (one tenant, max_sandboxes 64, workers 48)."""

    def __init__(self, d):
        self.dir = d
        self.cfg = d / "sandboxd.json"
        self.cfg.write_text(json.dumps({"tenants": {"load": {"token": TOKEN, "max_sandboxes": 64}},
                                        "workers": 48}))
        self.cfg.chmod(0o600)
        self.sock = d / "sandboxd.sock"
        self.proc = None
        self.log = None

    def start(self):
        self.log = open(self.dir / "sandboxd.log", "a")
        self.proc = subprocess.Popen([str(BUILD / "bin/sandboxd"), "--config", str(self.cfg),
                                      "--socket", str(self.sock)], stdout=self.log, stderr=subprocess.STDOUT)
        # The socket appears (renamed into place) once the daemon serves: wait for that event.
        deadline = time.monotonic() + 120
        while True:
            assert self.proc.poll() is None, (self.dir / "sandboxd.log").read_text()[-3000:]
            if self.sock.exists():
                try:
                    if self.call("GET", "/v1/info")[0] == 200:
                        return time.monotonic()
                except OSError:
                    pass
            assert time.monotonic() < deadline, "sandboxd did not serve within 120 s"
            time.sleep(0.01)

    def call(self, method, path, body=None, timeout=60):
        c = UnixHTTPConnection(str(self.sock), timeout=timeout)
        try:
            c.request(method, path, body=None if body is None else json.dumps(body),
                      headers={"Authorization": "Bearer " + TOKEN})
            r = c.getresponse()
            data = r.read()
            return r.status, json.loads(data) if data else {}, dict(r.getheaders())
        finally:
            c.close()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
        if self.log:
            self.log.close()
        return self.proc.returncode if self.proc else None


@pytest.fixture
def daemon(root_only, tmp_path):
    d = Daemon(tmp_path)
    d.start()
    yield d
    assert d.stop() == 0, (tmp_path / "sandboxd.log").read_text()[-3000:]


def load(target_args, out, runs, conc, env=None, timeout=900):
    r = run([str(BUILD / "bin/sandcheck"), "run", "--scenario", "load", "--runs", str(runs),
             "--concurrency", str(conc), "--out", str(out)] + target_args, timeout=timeout,
            env=dict(os.environ, **(env or {})))
    path = out / "report.json"
    assert path.exists(), f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r, json.loads(path.read_text())


def assert_clean(r, report, runs):
    checks = {c["id"]: c for c in report["checks"]}
    assert set(checks) == {"load/no-lost", "load/no-wrong", "load/no-leak", "load/descriptors-flat"}
    for cid, c in checks.items():
        assert c["outcome"] == "pass", f'{cid}: {c["outcome"]}: {c["reason"]}'
    assert r.returncode == 0, r.stdout[-3000:]
    ld = report["load"]
    assert ld["ok"] == runs and ld["lost"] == 0 and ld["wrong"] == 0
    assert ld["runs_per_second"] > 0 and ld["latency"]["count"] == runs


def test_reference_in_process_loses_nothing(root_only, tmp_path):
    r, report = load([], tmp_path / "out", runs=200, conc=8)
    assert_clean(r, report, 200)
    assert report["load"]["method"] == "run_pooled"
    # The in-process runtime reports its own descriptors: flat after the load.
    assert report["load"]["target_after"]["open_fds"] <= report["load"]["target_before"]["open_fds"] + 4
    assert (tmp_path / "out/report.md").exists() and (tmp_path / "out/junit.xml").exists()


def test_sandboxd_at_concurrency_32_loses_nothing_and_stays_bounded(daemon, tmp_path):
    """The issue's set-up (one tenant, max_sandboxes 64, workers 48, 32 clients): before the fix
    46 % failed with EMFILE and the daemon's descriptors grew to 7,400+."""
    peak = {"fds": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak["fds"] = max(peak["fds"], len(os.listdir(f"/proc/{daemon.proc.pid}/fd")))
            except OSError:
                pass
            stop.wait(0.05)

    t = threading.Thread(target=sample)
    t.start()
    try:
        r, report = load(["--target", f"unix:{daemon.sock}"], tmp_path / "out", runs=640, conc=32,
                         env={"SANDCHECK_TOKEN": TOKEN})
    finally:
        stop.set()
        t.join()
    assert_clean(r, report, 640)
    status, info, _ = daemon.call("GET", "/v1/info")
    cap = info["capacity"]
    # Every bound is in the info, with where it stands.
    assert cap["reclaim_backlog"] >= 1 and cap["pool"]["ceiling"] >= 1
    assert cap["server"]["workers"] == 48 and cap["tenant"]["max_sandboxes"] == 64
    # Bounded while it ran: what grows with load is capped by workers + pool + backlog, about
    # a dozen descriptors per sandbox (the unbounded daemon held > 7,000 here).
    bound = 15 * (48 + cap["pool"]["ceiling"] + cap["reclaim_backlog"] + cap["background_threads"]) + 300
    assert peak["fds"] <= bound, f"sandboxd held {peak['fds']} descriptors under load (bound {bound})"


def test_load_usage_errors(tmp_path):
    sc = str(BUILD / "bin/sandcheck")
    for args, needle in [(["--scenario", "load", "--runs", "0"], "--runs"),
                         (["--scenario", "load", "--concurrency", "x"], "--concurrency"),
                         (["--scenario", "load", "--repeat", "2"], "--repeat"),
                         (["--scenario", "six-task", "--runs", "5"], "--scenario load only"),
                         (["--scenario", "load", "--scenario", "six-task"], "alone")]:
        r = run([sc, "run", "--out", str(tmp_path / "o")] + args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert needle in r.stderr, (args, r.stderr)


def descendants(pid):
    """(pid, start time) of every process below `pid`, from /proc."""
    parent = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            stat = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parent[int(p)] = (int(fields[1]), fields[19])
    out, frontier = [], [pid]
    while frontier:
        cur = frontier.pop()
        for child, (pp, start) in parent.items():
            if pp == cur:
                out.append((child, start))
                frontier.append(child)
    return out


def alive(stamp):
    pid, start = stamp
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[19] == start and fields[0] != "Z"


def runtime_cgroups(pid):
    """The cgroup directories a runtime in process `pid` created (named sandcheck-PID-*)."""
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        for d in dirs:
            if d.startswith(f"sandcheck-{pid}-"):
                found.append(os.path.join(root, d))
    return found


ROUNDS = int(os.environ.get("SBX_FAULT_ROUNDS", "4"))


def test_kill_9_anywhere_in_a_load_run(daemon):
    """kill -9 of sandboxd at random points of a load run (during create, exec, revert, destroy,
    refill: the clients keep all of them going), then a restart: clients get a clear error, the
    new daemon sweeps every orphan (NFR-5; the time is a figure), no sandbox of the old one
    answers, and the new one serves."""
    rng = random.Random(int(os.environ.get("SBX_FAULT_SEED", "17")))
    clear_errors = (ConnectionRefusedError, FileNotFoundError, ConnectionResetError, BrokenPipeError,
                    http.client.RemoteDisconnected, http.client.IncompleteRead)
    figures = []
    for rnd in range(ROUNDS):
        outcomes, unclear = {"ok": 0, "clear_error": 0, "503": 0}, []
        stop = threading.Event()
        persistent = []
        lock = threading.Lock()

        def client(i):
            k = 0
            while not stop.is_set():
                k += 1
                token = f"fault-{rnd}-{i}-{k}"
                try:
                    if k % 4 == 0:
                        # A persistent sandbox: create, exec, revert (destroyed by the kill or later).
                        s, b, _ = daemon.call("POST", "/v1/sandboxes", {"template": "sandbox"}, timeout=30)
                        if s == 201:
                            with lock:
                                persistent.append(b["sandbox"])
                            daemon.call("POST", f"/v1/sandboxes/{b['sandbox']}/exec", {"cmd": "echo x > f"}, timeout=30)
                            daemon.call("POST", f"/v1/sandboxes/{b['sandbox']}/revert", {}, timeout=30)
                        continue
                    s, b, h = daemon.call("POST", "/v1/run", {"cmd": f"echo {token}", "timeout_s": 20}, timeout=30)
                    if s == 200 and b.get("stdout") == token + "\n":
                        outcomes["ok"] += 1
                    elif s in (429, 503) and "Retry-After" in h:
                        outcomes["503"] += 1
                    else:
                        unclear.append((s, b))
                except clear_errors:
                    outcomes["clear_error"] += 1
                    time.sleep(0.01)
                except socket.timeout as e:  # a hang is never a clear error
                    unclear.append(("timeout", repr(e)))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.2, 1.5))
        old_pid = daemon.proc.pid
        before = descendants(old_pid)
        os.kill(old_pid, signal.SIGKILL)
        # The old daemon's sandboxes: the clients go on creating on the new one once it serves
        # (until `stop`), and those must not be mistaken for survivors of the old one.
        with lock:
            old_sandboxes = list(persistent)
        daemon.proc.wait()
        time.sleep(0.2)  # clients meet the dead daemon (connection refused / reset)
        serving = daemon.start()
        stop.set()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive(), "a client hung on a killed daemon"
        # NFR-5: the new daemon sweeps the orphans of the killed one. The test waits for that
        # event, bounded by NFR-5's product limit (10 s); the time it took is a figure, gated by
        # the NFR scenario (docs/nfr.md), not asserted here against a machine's speed.
        while any(alive(s) for s in before) or runtime_cgroups(old_pid):
            assert time.monotonic() - serving < 10.0, (
                f"round {rnd}: orphans of pid {old_pid} still there 10 s after the restart: "
                f"{[s for s in before if alive(s)][:5]} {runtime_cgroups(old_pid)[:5]}")
            time.sleep(0.01)
        swept = time.monotonic() - serving
        assert not unclear, f"round {rnd}: answers that are neither a result nor a clear error: {unclear[:5]}"
        # No sandbox of the old daemon answers; the new one serves a run.
        for sid in old_sandboxes[:5]:
            assert daemon.call("GET", f"/v1/sandboxes/{sid}")[0] == 404
        s, b, _ = daemon.call("POST", "/v1/run", {"cmd": "echo after", "timeout_s": 20})
        assert s == 200 and b["stdout"] == "after\n", b
        figures.append({"round": rnd, "orphan_processes": len(before), "swept_within_s": round(swept, 3), **outcomes})
    print(json.dumps(figures))
