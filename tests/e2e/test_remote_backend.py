"""The remote backend (BK-7, issue 14): a front sandboxd places sandboxes on a pool of real
sandboxd workers on this machine (each on its own unix socket), forwards every lifecycle call,
and meets a worker killed with SIGKILL: that worker's sandboxes answer sandbox_unavailable naming
it, at once (never a hang), new sandboxes go to the survivor, and the six tasks still pass. The
killed worker's sandboxes are swept as orphans by the reaper of a live runtime on the host.
Requirement IDs: ../shared/design/requirements.md (BK-7, FAIL-1, LC-7, NFR-5)."""
import json
import os
import pathlib
import signal
import sys
import time

import pytest

from test_sandboxd import Daemon, UnixHTTPConnection, call, cgroups_of

sys.path.insert(0, str(pathlib.Path(__file__).parent / "data"))
from sandcheck_support import sandcheck  # noqa: E402

FRONT = "alice-front-token-0123456789"
WORKER = {"w1": "alice-on-w1-token-0123456789", "w2": "alice-on-w2-token-0123456789"}


def config(path, token, **extra):
    cfg = {"tenants": {"alice": {"token": token}}}
    cfg.update(extra)
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    return path


class Pool:
    """Two workers and a front that places on them."""

    def __init__(self, base):
        self.base = base
        self.workers = {}
        for name, token in WORKER.items():
            d = base / name
            d.mkdir()
            sock = str(d / "sandboxd.sock")
            w = Daemon(d, ["--config", str(config(d / "c.json", token)), "--socket", sock])
            w.sock, w.token = sock, token
            self.workers[name] = w
        for w in self.workers.values():
            w.wait_ready(lambda w=w: self.answers(w.sock, w.token))
        d = base / "front"
        d.mkdir()
        self.sock = str(d / "sandboxd.sock")
        workers = [{"name": n, "url": f"unix:{w.sock}", "tokens": {"alice": w.token}}
                   for n, w in self.workers.items()]
        self.front = Daemon(d, ["--config", str(config(d / "c.json", FRONT, remote_workers=workers,
                                                         remote_call_timeout_s=5)),
                                "--socket", self.sock])
        self.front.wait_ready(lambda: self.answers(self.sock, FRONT))

    @staticmethod
    def answers(sock, token):
        if not os.path.exists(sock):
            return False
        try:
            status, _, _ = call(lambda: UnixHTTPConnection(sock, timeout=5), "GET", "/v1/info", token=token)
            return status == 200
        except OSError:
            return False

    def call(self, method, path, body=None, sock=None, token=FRONT, timeout=60):
        return call(lambda: UnixHTTPConnection(sock or self.sock, timeout=timeout), method, path,
                    body=body, token=token)

    def listed(self, name):
        w = self.workers[name]
        status, _, body = self.call("GET", "/v1/sandboxes", sock=w.sock, token=w.token)
        assert status == 200, body
        return {s["id"] for s in body["sandboxes"]}

    def create(self):
        status, _, body = self.call("POST", "/v1/sandboxes", {"backend": "remote", "trust": "verified"})
        assert status == 201, body
        return body["sandbox"]

    def stop(self):
        self.front.stop()
        for w in self.workers.values():
            w.stop()


@pytest.fixture
def pool(tmp_path, root_only):
    p = Pool(tmp_path)
    yield p
    p.stop()


def test_info_names_the_workers_and_placement_spreads(pool):
    status, _, info = pool.call("GET", "/v1/info")
    assert status == 200
    assert "remote" in info["backends"], info["unsupported"]
    impl = info["implementations"]["remote"]
    assert "2 sandboxd workers" in impl and "w1" in impl and "w2" in impl, impl
    ids = [pool.create() for _ in range(4)]
    on = {n: pool.listed(n) for n in pool.workers}
    # Least loaded first: two each.
    assert len(on["w1"]) == 2 and len(on["w2"]) == 2, on
    for sid in ids:
        status, _, r = pool.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo hi; ls /work | wc -l"})
        assert status == 200 and r["status"] == "ok", r
        assert r["stdout"] == "hi\n0\n" and r["sandbox"] == sid and r["backend"] == "remote", r
    # The worker chose its own backend from the trust class (verified: never native).
    for n, w in pool.workers.items():
        status, _, body = pool.call("GET", "/v1/sandboxes", sock=w.sock, token=w.token)
        assert all(s["backend"] != "native" for s in body["sandboxes"]), body
    for sid in ids:
        status, _, body = pool.call("DELETE", f"/v1/sandboxes/{sid}")
        assert status == 200, body
    assert pool.listed("w1") == set() and pool.listed("w2") == set()


def test_a_killed_worker_is_reported_not_waited_for(pool):
    ids = [pool.create() for _ in range(4)]
    on_w1 = pool.listed("w1")
    assert len(on_w1) == 2
    w1 = pool.workers["w1"]
    w1.proc.send_signal(signal.SIGKILL)
    w1.proc.wait(timeout=30)
    lost, alive = [], []
    for sid in ids:
        t0 = time.monotonic()
        status, _, r = pool.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo alive"})
        took = time.monotonic() - t0
        assert took < 5, (sid, took)  # the call bound at most; a dead socket answers at once
        if status == 200 and r.get("status") == "ok":
            alive.append(sid)
        else:
            lost.append(sid)
            assert r["error"]["code"] == "sandbox_unavailable", r
            assert "remote worker w1" in r["error"]["message"] and "stopped answering" in r["error"]["message"], r
    assert len(lost) == 2 and len(alive) == 2, (lost, alive)
    # New sandboxes go to the survivor; info says which worker is down.
    new = [pool.create() for _ in range(2)]
    assert set(new) and len(pool.listed("w2")) == 4
    status, _, info = pool.call("GET", "/v1/info")
    assert "w1" in info["implementations"]["remote"] and "down" in info["implementations"]["remote"], info
    for sid in ids + new:
        status, _, body = pool.call("DELETE", f"/v1/sandboxes/{sid}")
        assert status == 200, body
    assert pool.listed("w2") == set()
    # w1's sandboxes are orphans: a live runtime's reaper (the front's, w2's) sweeps them.
    assert wait_for(lambda: not cgroups_of(w1.proc.pid)), cgroups_of(w1.proc.pid)


def six_task_through(pool, out_dir):
    """Starts `sandcheck run --backend remote --scenario six-task` against the front."""
    import subprocess
    from sandcheck_support import SANDCHECK

    env = dict(os.environ, SANDCHECK_TOKEN=FRONT)
    args = [str(SANDCHECK), "run", "--target", f"unix:{pool.sock}", "--backend", "remote",
            "--scenario", "six-task", "--out", str(out_dir)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def wait_for(predicate, timeout=60):
    """Polls `predicate` (an event a test waits on) until it holds or `timeout` passes."""
    deadline = time.time() + timeout
    while time.time() < deadline and not predicate():
        time.sleep(0.05)
    return predicate()


def test_six_tasks_through_the_pool_with_a_worker_killed_during_the_run(pool, tmp_path):
    run = six_task_through(pool, tmp_path / "killed")
    # Kill w1 once the run has a sandbox there (the scenario's first lands on the first worker).
    assert wait_for(lambda: pool.listed("w1")), "the run placed nothing on w1"
    pool.workers["w1"].proc.send_signal(signal.SIGKILL)
    out, _ = run.communicate(timeout=300)  # reported, not hung
    report = json.loads((tmp_path / "killed" / "report.json").read_text())
    lost = [c for c in report["checks"] if c["outcome"] not in ("pass", "skip")]
    assert lost, out  # something was on w1 when it died
    assert "remote worker w1" in json.dumps(report), out
    # With w1 still dead (and still configured), the six tasks pass on w2.
    again = sandcheck(["run", "--target", f"unix:{pool.sock}", "--backend", "remote",
                       "--scenario", "six-task"], out_dir=tmp_path / "again", env={"SANDCHECK_TOKEN": FRONT},
                      timeout=300)
    assert again.code == 0, again
    assert {c["outcome"] for c in again.report["checks"]} == {"pass"}, again


def test_a_hung_worker_costs_the_call_bound_not_a_hang(pool):
    # SIGSTOP: the worker's socket still accepts (the kernel queues), nothing answers. Every
    # forwarded call is bounded (remote_call_timeout_s = 5 here; an exec by its timeout + 5).
    ids = [pool.create() for _ in range(2)]
    on_w1 = pool.listed("w1")
    assert len(on_w1) == 1
    w1 = pool.workers["w1"]
    os.kill(w1.proc.pid, signal.SIGSTOP)
    try:
        for sid in ids:
            t0 = time.monotonic()
            status, _, r = pool.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo alive", "timeout_s": 1})
            took = time.monotonic() - t0
            if status == 200 and r.get("status") == "ok":
                assert took < 5, took
                continue
            # the exec's bound (1 + 5 s), then one info call to tell silence from an answer (5 s)
            assert took < 13, took
            assert r["error"]["code"] == "sandbox_unavailable", r
            assert "remote worker w1" in r["error"]["message"], r
            # the sandbox is lost: the next call answers at once
            t0 = time.monotonic()
            status, _, r = pool.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo again"})
            assert time.monotonic() - t0 < 2 and r["error"]["code"] == "sandbox_unavailable", r
        # New sandboxes go to w2 while w1 is down (asked again only after 5 s, then bounded).
        t0 = time.monotonic()
        new = pool.create()
        assert time.monotonic() - t0 < 8
        assert new and len(pool.listed("w2")) == 2
    finally:
        os.kill(w1.proc.pid, signal.SIGCONT)
    for sid in ids + [new]:
        pool.call("DELETE", f"/v1/sandboxes/{sid}")


def test_six_tasks_pass_while_another_worker_is_killed(pool, tmp_path):
    # Five sandboxes made on w1 directly (another client's) make w2 the least loaded by the
    # workers' own counts: the run lands on w2, and w1 dies under it.
    w1 = pool.workers["w1"]
    for _ in range(5):
        status, _, body = pool.call("POST", "/v1/sandboxes", {"trust": "verified"}, sock=w1.sock, token=w1.token)
        assert status == 201, body
    assert len(pool.listed("w1")) == 5
    run = six_task_through(pool, tmp_path / "run")
    assert wait_for(lambda: pool.listed("w2")), "the run placed nothing on w2"
    w1.proc.send_signal(signal.SIGKILL)
    w1.proc.wait(timeout=30)
    out, _ = run.communicate(timeout=300)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert run.returncode == 0, out
    assert {c["outcome"] for c in report["checks"]} == {"pass"}, out
    # The front says so once it has asked (a create after the retry interval, or info).
    status, _, info = pool.call("GET", "/v1/info")
    assert status == 200
    deadline = time.time() + 30
    while time.time() < deadline and "down" not in info["implementations"]["remote"]:
        pool.create()  # placement asks every worker (a down one after 5 s)
        status, _, info = pool.call("GET", "/v1/info")
        time.sleep(0.5)
    assert "w1" in info["implementations"]["remote"] and "down" in info["implementations"]["remote"], info
    # w1's sandboxes are orphans: swept by a live runtime's reaper.
    assert wait_for(lambda: not cgroups_of(w1.proc.pid)), cgroups_of(w1.proc.pid)
