"""End-to-end tests of the latency targets and the reproductions against the REAL reference
runtime (root): `sandcheck run --scenario nfr` on a short sample (every target it can run is
measured, NFR-5 by really killing a runtime with SIGKILL), `sandcheck gate` on that report, and
smoke runs of `sandcheck reproduce throttle|revert|suspend` with tiny work, whose only timing
assertion is a ratio measured in the same run (the CPU cap must bite)."""
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "data"))
from sandcheck_support import JUNIT_XSD, REPORT_SCHEMA, sandcheck  # noqa: E402

jsonschema = pytest.importorskip("jsonschema")


def leftovers():
    """Directories a crashed NFR-5 measurement could leave (its private state directories)."""
    return sorted(p.name for p in pathlib.Path("/run").glob("sandcheck-nfr5-*"))


@pytest.fixture(scope="module")
def nfr_run(tmp_path_factory, root_only):
    before = leftovers()
    out = tmp_path_factory.mktemp("nfr-ref") / "out"
    r = sandcheck(["run", "--scenario", "nfr", "--samples", "20", "--backend", "native"], out_dir=out, timeout=300)
    assert r.report is not None, r
    assert leftovers() == before, "the NFR-5 measurement left its state directory behind"
    return r


def test_reference_nfr_measures_every_target_the_machine_can_run(nfr_run):
    rep = nfr_run.report
    jsonschema.Draft202012Validator(json.loads(REPORT_SCHEMA.read_text())).validate(rep)
    checks = {c["id"]: c for c in rep["checks"]}
    assert rep["errors"] == [], rep["errors"]
    for cid in ("nfr/warm-start-native", "nfr/warm-start-pooled-native", "nfr/teardown-native",
                "nfr/teardown-reclaim-native"):
        assert checks[cid]["outcome"] in ("pass", "fail"), checks[cid]
        assert checks[cid]["evidence"]["count"] == 20
    # NFR-4's caller's path is timed by both clocks, which must agree (docs/nfr.md).
    clocks = checks["nfr/teardown-native"]["evidence"]["clocks"]
    assert clocks["agree"], clocks
    # NFR-2/NFR-3 need backends this machine does not have: skipped with the reason.
    assert checks["nfr/cold-start-microvm-microvm"]["outcome"] == "skip"
    assert checks["nfr/wasm-instantiation-wasm"]["outcome"] == "skip"
    # NFR-5 for real: a runtime holding live sandboxes was killed, and the census saw its
    # processes, cgroups and state directory appear and then go.
    orphan = checks["nfr/orphan-sweep"]
    assert orphan["outcome"] in ("pass", "fail"), orphan
    samples = orphan["evidence"]["orphan_sweep"]["samples"]
    assert len(samples) == orphan["evidence"]["count"] >= 1
    for s in samples:
        assert s["processes"] >= 5 and s["cgroup_dirs"] >= 5 and s["state_dirs"] == 1, s
        assert "left" not in s, s
        assert 0 <= s["processes_gone_s"] <= s["seconds"]
    # The runtime's own stage timings are recorded beside the harness clock.
    names = {(m["name"], m["clock"]) for m in rep["measurements"]}
    assert ("warm-start", "target") in names and ("warm-start.stage.execute", "target") in names
    assert ("teardown-reclaim", "target") in names and ("teardown", "target") in names
    # The harness clock of a warm exec is never below what the runtime says the exec took.
    ms = {(m["name"], m["clock"]): m for m in rep["measurements"]}
    assert ms[("warm-start", "harness")]["p50"] >= ms[("warm-start", "target")]["p50"]
    # Verdict and exit code agree.
    assert nfr_run.code == (1 if any(c["blocking"] for c in rep["checks"]) else 0), nfr_run


def test_gate_on_the_reference_report_agrees_with_the_run(nfr_run, tmp_path):
    junit = tmp_path / "gate.xml"
    g = sandcheck(["gate", str(nfr_run.out_dir / "report.json"), "--junit", str(junit)])
    breached = [c for c in nfr_run.report["checks"] if c["outcome"] == "fail"]
    assert g.code == (1 if breached else 0), g
    if shutil.which("xmllint"):
        p = subprocess.run(["xmllint", "--noout", "--schema", str(JUNIT_XSD), str(junit)],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
    # Against itself as a baseline nothing regresses.
    g = sandcheck(["gate", str(nfr_run.out_dir / "report.json"), "--baseline",
                   str(nfr_run.out_dir / "report.json"), "--tolerance", "0%"])
    assert "ratio:" in g.out
    assert not re.search(r"^ratio:\S+\tfail", g.out, re.M), g.out


def test_reproduce_throttle_smoke_the_cap_bites(root_only, tmp_path):
    out = tmp_path / "throttle"
    r = sandcheck(["reproduce", "throttle", "--work", "60", "--millicores", "1000,250", "--threads", "1",
                   "--runs", "1", "--backend", "native", "--out", str(out)], timeout=300)
    assert r.code == 0, r
    data = json.loads((out / "throttle.json").read_text())
    rows = {(row["millicores"], row["threads"]): row for row in data["backends"][0]["rows"]}
    full, capped = rows[(1000, 1)], rows[(250, 1)]
    # RES-1: the same fixed work under a quarter of a core takes clearly longer (4× in theory;
    # 2× leaves room for noise and the per-call overhead, which biases towards 1). Against the
    # uncapped run's wall time or, where the cgroup reported it, the CPU time that run needed: a
    # busy machine slows the uncapped run's wall clock, not its CPU seconds (as the six-task
    # check judges it).
    base = min([full["wall_s"][0]] + full["cpu_host_s"][:1])
    assert capped["wall_s"][0] / base >= 2.0, (full, capped)
    # The cgroup's accounting is reported and the cap shows in it: well under one core.
    assert capped["host_cores"] and capped["host_cores"][0] < 0.5, capped
    assert "| 250 | 1 |" in (out / "throttle.md").read_text()
    for svg in out.glob("*.svg"):
        p = subprocess.run(["xmllint", "--noout", str(svg)], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, (svg, p.stderr)
    assert len(list(out.glob("throttle-*.svg"))) == 2


def test_reproduce_revert_smoke(root_only, tmp_path):
    out = tmp_path / "revert"
    r = sandcheck(["reproduce", "revert", "--rounds", "2", "--backend", "native", "--out", str(out)], timeout=120)
    assert r.code == 0, r
    rows = json.loads((out / "revert.json").read_text())["backends"][0]["rows"]
    assert len(rows) == 2
    assert all(row["files_after"] == "0" for row in rows), rows  # SCN-7 after every revert
    assert all(row["revert_s"] > 0 and row["first_request_s"] > 0 for row in rows)


def test_reproduce_suspend_smoke_the_memory_stays_held(root_only, tmp_path):
    out = tmp_path / "suspend"
    r = sandcheck(["reproduce", "suspend", "--sizes", "16,64", "--runs", "1", "--backend", "native",
                   "--out", str(out)], timeout=120)
    assert r.code == 0, r
    rows = json.loads((out / "suspend.json").read_text())["backends"][0]["rows"]
    assert [row["mib"] for row in rows] == [16, 64]
    for row in rows:
        assert row["holder_alive"], row  # sbx-memhog --hold kept its memory through the cycle
        assert row["memory_peak_bytes"] >= row["mib"] << 20, row  # the cgroup saw it resident
        assert row["suspend_s"] and row["resume_s"], row


def test_reproduce_bad_usage():
    assert sandcheck(["reproduce"]).code == 2
    assert sandcheck(["reproduce", "snapshot"]).code == 2
    assert sandcheck(["reproduce", "revert", "--sizes", "64"]).code == 2
    assert sandcheck(["reproduce", "throttle", "--millicores", "1000,abc"]).code == 2


def test_nfr_over_the_execution_api_of_sandboxd(root_only, tmp_path):
    """The same targets through the HTTP driver against a real sandboxd on a unix socket: the
    one-shot run goes through POST /v1/run (the daemon's warm pools), and between samples the
    harness waits for the daemon's background work, which sandboxd reports (GET /v1/info
    capacity.background_outstanding): so teardown-reclaim puts the daemon's reclaim on the clock."""
    import os
    import time
    build = pathlib.Path(os.environ.get("SBX_BUILD", pathlib.Path(__file__).resolve().parents[2] / "build"))
    daemon = build / "bin" / "sandboxd"
    if not daemon.exists():
        pytest.fail(f"build first: {daemon} missing")
    token = "nfr-e2e-token-0123456789abcdef"
    cfg = tmp_path / "sandboxd.json"
    cfg.write_text(json.dumps({"tenants": {"alice": {"token": token}}}))
    cfg.chmod(0o600)
    sock = tmp_path / "s.sock"
    log = open(tmp_path / "sandboxd.log", "w")
    proc = subprocess.Popen([str(daemon), "--config", str(cfg), "--socket", str(sock)], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60  # the socket appears once the daemon is ready
        while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists(), (tmp_path / "sandboxd.log").read_text()
        r = sandcheck(["run", "--scenario", "nfr", "--target", f"unix:{sock}", "--backend", "native",
                       "--samples", "5", "--only", "warm-start-pooled,teardown,teardown-reclaim,orphan-sweep"],
                      out_dir=tmp_path / "out", env={"SANDCHECK_TOKEN": token}, timeout=120)
        assert r.report is not None, r
        checks = {c["id"]: c for c in r.report["checks"]}
        assert checks["nfr/warm-start-pooled-native"]["evidence"]["count"] == 5, checks
        reclaim = checks["nfr/teardown-reclaim-native"]["evidence"]["reclaim"]
        assert "over HTTP" in reclaim and "background_outstanding" in reclaim, reclaim
        assert "waited for" in checks["nfr/warm-start-pooled-native"]["evidence"]["settle"]
        assert checks["nfr/teardown-native"]["evidence"]["count"] == 5
        assert checks["nfr/orphan-sweep"]["outcome"] == "skip"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    assert proc.returncode == 0, (tmp_path / "sandboxd.log").read_text()


def test_nfr_over_an_execution_api_that_does_not_report_its_background_work(tmp_path):
    """An Execution API other than sandboxd need not report capacity.background_outstanding: the
    harness cannot wait for its refill, pauses instead (20 ms, untimed), and says so in the
    evidence, rather than claiming a settled pool. Served here by a minimal API in this process."""
    import http.server
    import threading

    calls = []

    class Api(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def answer(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            calls.append(("GET", self.path))
            self.answer({"name": "minimal-api", "version": "0", "backends": ["native"],
                         "features": ["destroy"]})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            calls.append(("POST", self.path))
            self.answer({"status": "ok", "state": "RUNNING", "exit": 0, "stdout": "",
                         "stderr": "", "seconds": 0.0001})

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = sandcheck(["run", "--scenario", "nfr", "--target", f"http://127.0.0.1:{server.server_port}",
                       "--backend", "native", "--samples", "3", "--only", "warm-start-pooled"],
                      out_dir=tmp_path / "out", timeout=120)
    finally:
        server.shutdown()
    assert r.report is not None, r
    ev = {c["id"]: c for c in r.report["checks"]}["nfr/warm-start-pooled-native"]["evidence"]
    assert ev["count"] == 3, ev
    assert "does not report its background work" in ev["settle"], ev
    # One settle (a GET /v1/info) before every timed run.
    runs = [i for i, c in enumerate(calls) if c == ("POST", "/v1/run")]
    assert len(runs) == 4 and all(calls[i - 1] == ("GET", "/v1/info") for i in runs[1:]), calls
