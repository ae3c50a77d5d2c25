"""Bad inputs and misbehaving targets: clear errors, the right exit codes, never a hang.

Exit codes: 2 bad usage or input; 3 the target or the environment failed.
"""
import json
import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / "data"))
from sandcheck_support import (FAST, SIM, FakeExecutionApi, free_port,   # noqa: E402
                               processes_with_env, sandcheck, sim_run, validate_report)


def run_args(*extra):
    return ["run", "--target", f"adapter:{SIM}", "--mirror", "127.0.0.1:9"] + FAST + list(extra)


@pytest.mark.parametrize("args, message", [
    (["run", "--bogus"], "unknown option --bogus"),
    (["run", "--profile", "lenient"], "--profile 'lenient'"),
    (["run", "--var", "novalue"], "expected NAME=VALUE"),
    (["run", "--var", "mirror_hots=x"], "no scenario of this run declares it"),
    (["run", "--var", "mirror_host=a;rm -rf /"], "does not match"),
    (["run", "--scenario", "nope"], "no scenario named 'nope'"),
    (["run", "--scenario", "all", "--scenario", "six-task"], "scenario 'six-task' given twice"),
    (["run", "--scenario", "/nonexistent/s.json"], "does not exist"),
    (["run", "--target", "ftp://x"], "expected reference, http://HOST:PORT"),
    (["run", "--target", "adapter:/nonexistent/adapter"], "no such file"),
    (["run", "--target", "http://host:99999"], "bad port"),
    (["run", "--adapter-timeout", "0"], "--adapter-timeout"),
    (["run", "--expectations", "/nonexistent.json"], "cannot read"),
    (["frobnicate"], "unknown command"),
    (["render"], "exactly one REPORT.json"),
    (["list", "--scenario", "nope"], "no scenario named"),
])
def test_bad_usage_exits_2(tmp_path, args, message):
    r = sandcheck(args, cwd=tmp_path, timeout=20)
    assert r.code == 2, r
    assert message in r.err, r
    assert not (tmp_path / "reports").exists()  # nothing run, nothing written


def test_malformed_scenario(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "format": 1,\n  "name": "bad",\n  "tasks": [\n}\n')
    r = sandcheck(run_args("--scenario", str(bad)), timeout=20)
    assert r.code == 2, r
    assert f"{bad}:5:" in r.err and "malformed JSON" in r.err


def test_unknown_key_in_scenario(tmp_path):
    six = json.loads((pathlib.Path(__file__).parents[2] / "scenarios" / "six-task.json").read_text())
    six["tasks"][1]["check"]["parms"] = {}
    bad = tmp_path / "typo.json"
    bad.write_text(json.dumps(six))
    r = sandcheck(run_args("--scenario", str(bad)), timeout=20)
    assert r.code == 2, r
    assert "tasks[1].check.parms: unknown key 'parms'" in r.err


def test_bad_expectations_file(tmp_path):
    exp = tmp_path / "e.json"
    exp.write_text('{"expectations": {"six-task/cpu-cap": {"outcome": "pass", "reason": "x"}}}')
    r = sandcheck(run_args("--expectations", str(exp)), timeout=20)
    assert r.code == 2 and "expected fail, skip or flaky" in r.err, r
    exp.write_text('{"expectations": {"six-task/cpu-capp": {"outcome": "fail", "reason": "x"}}}')
    r = sandcheck(run_args("--expectations", str(exp)), timeout=20)
    assert r.code == 2 and "'six-task/cpu-capp' is not a check" in r.err, r
    exp.write_text('{"expectations": {}, "extra": 1}')
    r = sandcheck(run_args("--expectations", str(exp)), timeout=20)
    assert r.code == 2 and "unknown key 'extra'" in r.err, r


@pytest.mark.parametrize("fault, message", [
    ("garbage@info", "not one JSON object"),
    ("garbage@create", "not one JSON object"),
    ("garbage@exec", "not one JSON object"),
    ("exit@info", "failed with exit status 3; stderr: sim-adapter: simulated failure of info"),
    ("exit@revert", "failed with exit status 3"),
    ("exit@destroy", "failed with exit status 3"),
])
def test_misbehaving_adapter_exits_3(tmp_path, mirror, fault, message):
    r = sim_run(tmp_path, mirror, faults=fault)
    assert r.code == 3, r
    assert message in r.out, r  # the error is in the summary ...
    validate_report(r.report)   # ... and in a report that still validates
    assert any(message in e for e in r.report["errors"])
    assert r.report["summary"]["exit_code"] == 3
    # What the target could not show gets no verdict: error, never pass or fail.
    assert "error" in {c["outcome"] for c in r.report["checks"]}
    if fault.endswith(("@info", "@create")):
        assert {c["outcome"] for c in r.report["checks"]} == {"error"}


QUICK = {"format": 1, "name": "quick", "sandbox": {}, "variables": {"cpu_work": {"default": "1"}},
         "tasks": [{"id": "hi", "command": "echo hi", "timeout_s": 1,
                    "check": {"id": "quick/hi", "requirements": ["LC-5"], "level": "MUST", "kind": "exit_ok",
                              "params": {"stdout_contains": "hi"}}}]}


@pytest.mark.parametrize("op", ["info", "create", "exec", "revert", "destroy"])
def test_hanging_adapter_is_killed(tmp_path, mirror, op):
    marker = str(tmp_path)
    scenario = tmp_path / "quick.json"
    scenario.write_text(json.dumps(QUICK))
    t0 = time.monotonic()
    r = sim_run(tmp_path, mirror, faults=f"hang@{op}", extra=["--adapter-timeout", "1", "--scenario", str(scenario)],
                timeout=40)
    took = time.monotonic() - t0
    assert r.code == 3, r
    assert f"{op} did not answer within" in r.out and "process group was killed" in r.out, r
    # exec gets its command's own timeout (1 s here) on top; the others only the adapter timeout.
    # The bound leaves a loaded machine room and stays below the 30 s default it overrides.
    assert took < 25, took
    # Killed processes take a moment to go (at once when they do; a survivor waits it out).
    deadline = time.monotonic() + 30
    while processes_with_env(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with_env(marker) == [], "the hanging adapter's processes survived"


def test_unknown_op_exit_64_is_unsupported_not_failure(tmp_path, mirror):
    # A sim without egress.log answers gateway_log with 64; sandcheck does not even ask then.
    r = sim_run(tmp_path, mirror, env={"SIM_FEATURES": "egress,revert,limits.cpu,limits.memory"})
    assert r.code == 0, r


def test_http_target_end_to_end(tmp_path, mirror):
    state = tmp_path / "state"
    state.mkdir()
    api = FakeExecutionApi(state, token="t0ken")
    try:
        r = sandcheck(["run", "--target", api.spec, "--mirror", mirror.address, "--token", "t0ken"] + FAST,
                      out_dir=tmp_path / "out")
        assert r.code == 0, r
        assert r.report["target"]["driver"] == "http"
        assert "t0ken" not in json.dumps(r.report)  # the token never reaches a report
        log = [l.split("\t") for l in r.out.splitlines()[1:] if l.count("\t") == 5]
        assert {l[3] for l in log if l[1] == "task"} == {"200", "503"}  # http column: real statuses
        paths = [(m, p) for m, p, _, _ in api.requests]
        assert ("GET", "/v1/info") in paths and ("POST", "/v1/sandboxes") in paths
        assert any(m == "DELETE" for m, _ in paths)
        # A wrong token: 401 is the target failing (exit 3), with a message that says so.
        bad = sandcheck(["run", "--target", api.spec, "--mirror", mirror.address] + FAST,
                        out_dir=tmp_path / "bad", env={"SANDCHECK_TOKEN": "wrong"})
        assert bad.code == 3 and "refused the token" in bad.out, bad
    finally:
        api.close()


def test_unix_socket_target(tmp_path, mirror):
    state = tmp_path / "state"
    state.mkdir()
    api = FakeExecutionApi(state, token="t", unix_path=tmp_path / "api.sock")
    try:
        r = sandcheck(["run", "--target", api.spec, "--mirror", mirror.address] + FAST,
                      out_dir=tmp_path / "out", env={"SANDCHECK_TOKEN": "t"})
        assert r.code == 0, r
    finally:
        api.close()


def test_unreachable_http_target(tmp_path):
    r = sandcheck(["run", "--target", f"http://127.0.0.1:{free_port()}", "--mirror", "none"] + FAST,
                  out_dir=tmp_path / "out", timeout=20)
    assert r.code == 3, r
    assert "Connection refused" in r.out
    validate_report(r.report)
    assert {c["outcome"] for c in r.report["checks"]} == {"error"}


def test_missing_mirror_binary(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    r = sandcheck(["run", "--target", f"adapter:{SIM}", "--mirror-bin", "/nonexistent/sbx-mirror"] + FAST,
                  out_dir=tmp_path / "out", env={"SIM_STATE_DIR": str(state)}, timeout=20)
    assert r.code == 3, r
    assert "the mirror fixture /nonexistent/sbx-mirror is missing" in r.out


@pytest.mark.parametrize("cmd", [["--help"], ["run", "--help"], ["list", "--help"], ["coverage", "--help"],
                                 ["render", "--help"], ["--version"], ["list"], ["list", "--json"], ["coverage"]])
def test_informational_commands(cmd):
    r = sandcheck(cmd, timeout=20)
    assert r.code == 0, r
    assert r.out.strip()


@pytest.mark.parametrize("path", sorted((pathlib.Path(__file__).parents[2] / "conformance" / "expectations").glob("*.json")),
                         ids=lambda p: p.name)
def test_committed_expectations_files_load(tmp_path, path):
    # Loaded and checked against the scenarios before the target is even asked (exit 3 here:
    # nothing listens on the target); a malformed file would be exit 2.
    r = sandcheck(["run", "--target", f"http://127.0.0.1:{free_port()}", "--mirror", "none", "--expectations",
                   str(path)], out_dir=tmp_path / "out", timeout=20)
    assert r.code == 3, r
    assert r.report["expectations"]["file"] == str(path)
