"""The suite tests itself (docs/selftest.md): sandcheck against the REAL reference runtime (a
sandboxd on a unix socket) through planted-defect adapters (conformance/selftest/). For every
defect of conformance/selftest/defects.json, exactly the checks it names fail — no fewer (the
suite catches the defect) and no more (it blames nothing else) — and the control, `faithful`,
fails none."""
import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import time

import pytest

from conftest import BUILD, ROOT, run

DEFECTS = json.loads((ROOT / "conformance/selftest/defects.json").read_text())["defects"]
ADAPTERS = BUILD / "selftest"
TOKEN = "selftest-token-0123456789abcdef"
# The pool scenario's walk names two tenants (sandcheck's adapter-target names for them): the
# adapter makes each tenant's sandboxes with that tenant's token.
TOKEN_B = "selftest-token-b-0123456789abcdef"
WALK_TENANTS = {"sandcheck-a": TOKEN, "sandcheck-b": TOKEN_B}
# SEL-2 (backends/tenant-floor): a third tenant whose policy floor is gvisor.
TOKEN_FLOORED = "selftest-token-floored-0123456789"
TENANTS = dict(WALK_TENANTS, **{"sandcheck-floored": TOKEN_FLOORED})
FLOORS = {"sandcheck-floored": "gvisor"}


@pytest.fixture(scope="module")
def sandboxd(root_only, tmp_path_factory):
    d = tmp_path_factory.mktemp("selftest")
    cfg = d / "sandboxd.json"
    cfg.write_text(json.dumps({"tenants": {
        name: dict({"token": tok, "max_sandboxes": 64}, **({"floor": FLOORS[name]} if name in FLOORS else {}))
        for name, tok in TENANTS.items()}}))
    cfg.chmod(0o600)
    sock = d / "sandboxd.sock"
    log_path = d / "sandboxd.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([str(BUILD / "bin/sandboxd"), "--config", str(cfg), "--socket", str(sock)],
                            stdout=log, stderr=subprocess.STDOUT)
    # The socket appears (renamed into place) once the daemon serves: wait for that event,
    # bounded generously, and fail at once if the daemon exits instead.
    deadline = time.monotonic() + 120
    while not sock.exists():
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "sandboxd did not serve within 120 s: " + log_path.read_text()
        time.sleep(0.02)
    yield {"socket": sock, "dir": d}
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    log.close()
    assert proc.returncode == 0, log_path.read_text()


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=120)
        self.unix_path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(120)
        self.sock.connect(self.unix_path)


def _call(sandboxd, method, path, token):
    c = _UnixHTTP(sandboxd["socket"])
    try:
        c.request(method, path, headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def reap_leftovers(sandboxd):
    """Destroys every sandbox a defect left in the shared sandboxd (a destroy that does nothing,
    a recycled sandbox): their background loops (heartbeats, beacons) would load the machine
    that later defects' CPU checks judge by the clock. Returns how many there were."""
    n = 0
    for token in TENANTS.values():
        status, body = _call(sandboxd, "GET", "/v1/sandboxes", token)
        assert status == 200, body
        for sb in json.loads(body)["sandboxes"]:
            status, body = _call(sandboxd, "DELETE", f"/v1/sandboxes/{sb['id']}", token)
            assert status in (200, 204, 404), body
            n += 1
    return n


def run_defect(sandboxd, defect, scenarios, extra=()):
    out = sandboxd["dir"] / f"out-{defect}"
    args = [str(BUILD / "bin/sandcheck"), "run", "--target", f"adapter:{ADAPTERS}/defect-{defect}",
            "--expectations", "none", "--out", str(out)]
    for s in scenarios:
        args += ["--scenario", s]
    env = dict(os.environ, SANDCHECK_SELFTEST_TARGET=f"unix:{sandboxd['socket']}",
               SANDCHECK_SELFTEST_TOKEN=TOKEN, SANDCHECK_SELFTEST_TENANTS=json.dumps(TENANTS),
               SANDCHECK_SELFTEST_STATE=str(sandboxd["dir"] / f"state-{defect}"))
    try:
        r = run(args + list(extra), timeout=900, env=env)
    finally:
        reap_leftovers(sandboxd)
    report_path = out / "report.json"
    assert report_path.exists(), f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r, json.loads(report_path.read_text())


def not_passed(report):
    return {c["id"]: f'{c["outcome"]}: {c["reason"]}' for c in report["checks"]
            if c["outcome"] not in ("pass", "skip")}


@pytest.mark.parametrize("defect", DEFECTS, ids=[d["name"] for d in DEFECTS])
def test_defect_gets_its_verdict(sandboxd, defect):
    repeat = defect.get("repeat", 1)
    extra = list(defect.get("args", []))
    if repeat > 1:
        extra += ["--repeat", str(repeat)]
    r, report = run_defect(sandboxd, defect["name"], defect["scenarios"], extra=extra)
    assert report["errors"] == [], report["errors"]
    bad = not_passed(report)
    for cid, what in bad.items():
        assert what.startswith("fail"), f"{cid} is not a plain failure: {what}"
    assert set(bad) == set(defect["fail"]), (
        f'defect {defect["name"]} ({defect["why"]}): expected to fail exactly {sorted(defect["fail"])}, '
        f"got:\n" + "\n".join(f"  {k}: {v}" for k, v in sorted(bad.items())))
    assert r.returncode == (1 if defect["fail"] else 0), r.stdout[-2000:]
    # Every check the scenarios hold was judged (a defect must not hide checks by crashing them).
    assert report["summary"]["checks"] > 0
    if repeat > 1:
        # --repeat: every check ran each time with the same outcome (a flip would be "flaky").
        assert report["repeat"] == repeat
        for c in report["checks"]:
            assert sum(c["repeat"]["counts"].values()) == repeat, c["id"]


def test_every_defect_is_listed_and_tested():
    """defects.json and the adapter agree: every defect the adapter plants has a verdict here."""
    r = run([str(ADAPTERS / "sandcheck-defect"), "--list"])
    assert r.returncode == 0, r.stderr
    planted = {line.split("\t")[0] for line in r.stdout.splitlines() if line}
    assert planted == {d["name"] for d in DEFECTS}


def test_unknown_defect_and_op_are_clear_errors(tmp_path):
    env = dict(os.environ, SANDCHECK_DEFECT="no-such-defect")
    r = run([str(ADAPTERS / "sandcheck-defect"), "info"], input="{}", env=env)
    assert r.returncode == 2 and "unknown defect" in r.stderr
    r = run([str(ADAPTERS / "defect-faithful"), "frobnicate"], input="{}")
    assert r.returncode == 64
    assert json.loads(r.stdout)["error"]["code"] == "unimplemented"


def test_pool_walk_through_sandboxd_with_two_credentials(sandboxd, tmp_path):
    """The pool walk over the Execution API itself (no adapter): each tenant's sandboxes are made
    with its own token (--second-token), and the second lane goes through POST /v1/run, where
    sandboxd's warm pools are. The reference passes; a refused second token is a clear error."""
    base = [str(BUILD / "bin/sandcheck"), "run", "--target", f"unix:{sandboxd['socket']}",
            "--scenario", "pool", "--expectations", "none"]
    env = dict(os.environ, SANDCHECK_TOKEN=TOKEN, SANDCHECK_SECOND_TOKEN=TOKEN_B)
    r = run(base + ["--out", str(tmp_path / "out")], timeout=600, env=env)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    checks = {c["id"]: c for c in report["checks"]}
    assert r.returncode == 0, not_passed(report)
    assert {k for k, c in checks.items() if c["outcome"] == "pass"} == set(checks), checks
    walk = next(t for t in report["scenarios"][0]["tasks"] if t["id"] == "walk")["walk"]
    assert walk["pooled_note"] == "", walk["pooled_note"]  # the /v1/run lane ran
    assert {s["tenant"] for s in walk["steps"]} == set(WALK_TENANTS), walk["steps"]
    assert any(s["pooled"] for s in walk["steps"]) and any(not s["pooled"] for s in walk["steps"])
    # POOL-6 over the API: sandboxd's pools grew under the bursts of POST /v1/run.
    assert "warm/judged per burst" in checks["pool/size-adapts"]["reason"], checks
    # PROD-1 over the API: the other tenant's and the no-credential calls were all made.
    assert "6 of 6 calls" in checks["pool/other-tenant-refused"]["reason"], checks
    # One credential: the walk is a skip saying why, never a pass.
    r = run(base + ["--out", str(tmp_path / "one")], timeout=600,
            env=dict(os.environ, SANDCHECK_TOKEN=TOKEN))
    one = json.loads((tmp_path / "one" / "report.json").read_text())
    walk_checks = [c for c in one["checks"] if c["id"] not in ("pool/fresh-per-task", "pool/size-adapts")]
    assert all(c["outcome"] == "skip" and "--second-token" in c["reason"] for c in walk_checks), walk_checks
    # A second token the endpoint refuses ends the run before anything (exit 3), saying which.
    r = run(base + ["--out", str(tmp_path / "bad")], timeout=120,
            env=dict(os.environ, SANDCHECK_TOKEN=TOKEN, SANDCHECK_SECOND_TOKEN="not-a-token-of-anyone"))
    assert r.returncode == 3, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "second token" in r.stdout + r.stderr
