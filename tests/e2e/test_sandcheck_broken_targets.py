"""sandcheck against deliberately broken runtimes: each must fail exactly the checks it breaks.

The runtimes are the simulated adapter (conformance/tests/sim_adapter.cc, a test double) with
fault switches. SCN IDs: ../shared/design/requirements.md.
"""
import pathlib
import shlex
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / "data"))
from sandcheck_support import SIM, sim_run, validate_report  # noqa: E402

ALL = {"allowed-download", "outside-by-name", "outside-by-ip", "cluster-api-by-name", "cpu-cap", "memory-limit",
       "clean-after-revert", "revert-cost"}

# fault switch -> the checks it must fail (and only those)
BROKEN = {
    "": set(),
    "never-revert": {"clean-after-revert"},                                   # SCN-7
    "no-memory-limit": {"memory-limit"},                                      # SCN-6
    "no-cpu-limit": {"cpu-cap"},                                              # SCN-5
    "dns-resolves-everything": {"outside-by-name", "cluster-api-by-name"},    # SCN-2, SCN-4
    "ip-through": {"outside-by-ip"},                                          # SCN-3
    # A policy that drops instead of refusing: the bounded probes time out within the task, and
    # only SCN-3, which asks for the gateway's 403 (the demo's), fails, saying so.
    "drops-denied": {"outside-by-ip"},
    "oom-as-ok": {"memory-limit"},                                            # SCN-6
    # Defects that passed the six tasks before the checks looked further (issue 11):
    "partial-revert": {"clean-after-revert"},       # SCN-7: /work empty, the canaries survive
    "memory-limit-doubled": {"memory-limit"},       # SCN-6: killed at 512 MiB, not 256 MiB
    "cpu-limit-halved": {"cpu-cap"},                # SCN-5: 250m instead of 500m (4x, not 2x)
    "oom-kills-one": {"memory-limit"},              # RES-8: the shell ran on after the breach
    # SCN-1 fails, and SCN-2..4 must not pass on a runtime that reaches nothing at all.
    "no-network": {"allowed-download", "outside-by-name", "outside-by-ip", "cluster-api-by-name"},
    # Runs on the host: reaches everything, applies no limit; its revert empties /work, but the
    # canaries planted outside it (/tmp, $HOME, /etc, ...) survive.
    "no-isolation": {"outside-by-name", "outside-by-ip", "cluster-api-by-name", "cpu-cap", "memory-limit",
                     "clean-after-revert"},
}


@pytest.mark.parametrize("fault", sorted(BROKEN), ids=lambda f: f or "well-behaved")
def test_fails_exactly_what_it_breaks(tmp_path, mirror, fault):
    r = sim_run(tmp_path, mirror, faults=fault)
    assert r.report is not None, r
    assert set(r.outcomes()) == ALL
    assert r.failing() == BROKEN[fault], r
    assert r.code == (1 if BROKEN[fault] else 0), r
    validate_report(r.report)
    for c in r.report["checks"]:
        assert c["reason"], c  # every verdict says why
        assert c["requirements"] and c["level"] in ("MUST", "SHOULD")


def test_no_network_names_the_cause(tmp_path, mirror):
    r = sim_run(tmp_path, mirror, faults="no-network")
    by_id = {c["id"]: c for c in r.report["checks"]}
    for name in ("outside-by-name", "outside-by-ip", "cluster-api-by-name"):
        assert by_id[f"six-task/{name}"]["reason"].startswith("no egress at all: allowed download failed")


def test_distinguishes_what_the_network_said(tmp_path, mirror):
    # The CPU work is emulated as 1 s (not FAST's 0.1 s), so that the harness's per-call overhead,
    # which a loaded machine inflates, cannot move the wall-clock ratio checked below.
    r = sim_run(tmp_path, mirror, env={"SIM_CPU_SECONDS_PER_MILLION": str(1 / 60)})
    tasks = {t["id"]: t for t in r.report["scenarios"][0]["tasks"]}
    assert tasks["download"]["got"] == "file saved, exit 0"
    assert tasks["outside-name"]["got"] == "NXDOMAIN"
    assert tasks["outside-ip"]["got"] == "403 from the gateway"
    assert tasks["cluster-api"]["got"] == "NXDOMAIN"  # nslookup, then wget (SCN-4)
    assert tasks["memory"]["got"] == "resource_exceeded, CRASHED"
    assert [t["refused"] for t in tasks.values()] == [False, True, True, True, False, True]
    assert all(t["files_after"] == 0 for t in tasks.values())
    # The allowed download is proven by the gateway's log, not by the exit code alone.
    evidence = next(c for c in r.report["checks"] if c["id"] == "six-task/allowed-download")["evidence"]
    assert any(d["verdict"] == "allow" for d in evidence["gateway"])
    ip = next(c for c in r.report["checks"] if c["id"] == "six-task/outside-by-ip")["evidence"]
    assert ip["network"]["wget"] == "http_403"
    # SCN-5: judged on the harness's wall clock against the calibration, ~2x at 500m.
    cpu = next(c for c in r.report["checks"] if c["id"] == "six-task/cpu-cap")["evidence"]
    assert 1.6 <= cpu["ratio"] <= 2.6
    assert len(cpu["calibration"]) == 2
    ip_dis = sim_run(tmp_path, mirror, faults="ip-through", name="ip")
    reason = next(c for c in ip_dis.report["checks"] if c["id"] == "six-task/outside-by-ip")["reason"]
    assert "went through" in reason


def test_slow_exec_is_not_a_weaker_cap(tmp_path, mirror):
    # Issue 32, section 2: a faithful 500m cap on a runtime that spends 0.7 s on every exec.
    # The work is 1 s unthrottled (cpu_work 180), so the raw walls give 2.7 / 1.7 = 1.59x, under the 1.6x band;
    # the check takes the no-op exec's time off both (the command's own time): about 2x.
    r = sim_run(tmp_path, mirror, faults="slow-exec", env={"SIM_CPU_SECONDS_PER_MILLION": str(1 / 180)},
                timeout=240)
    assert r.failing() == set(), r
    assert r.code == 0, r
    cpu = next(c for c in r.report["checks"] if c["id"] == "six-task/cpu-cap")["evidence"]
    over = cpu["exec_overhead"]
    assert over["command"] == "true"
    assert len(over["calibration_sandbox"]) == 2 and len(over["capped_sandbox"]) == 2
    assert over["subtracted_seconds"] >= 0.7, over
    assert 1.6 <= cpu["ratio"] <= 2.6, cpu
    assert cpu["throttled_wall_seconds"] / cpu["unthrottled_wall_seconds"] < 1.7, cpu
    # The calibration runs around the capped run: one before it, one after (report order).
    tasks = {t["id"]: t for t in r.report["scenarios"][0]["tasks"]}
    phases = [s["phase"] for s in tasks["cpu"]["steps"] if s["phase"] in ("calibrate", "task")]
    assert phases == ["calibrate", "task", "calibrate"], phases


def test_gateway_evidence_required_when_offered(tmp_path, mirror):
    # The mirror answers, but a runtime that offers egress.log and logs nothing fails SCN-1.
    r = sim_run(tmp_path, mirror, env={"SIM_FEATURES": "egress,egress.log,revert,limits.cpu,limits.memory"},
                faults="no-isolation")
    assert "allowed-download" in r.failing()
    reason = next(c for c in r.report["checks"] if c["id"] == "six-task/allowed-download")["reason"]
    assert "gateway" in reason


def test_missing_features_skip_with_the_feature_named(tmp_path, mirror):
    r = sim_run(tmp_path, mirror, env={"SIM_FEATURES": "egress,egress.log,revert"})
    assert r.code == 0, r  # skips do not fail the default profile
    out = r.outcomes()
    assert out["cpu-cap"] == "skip" and out["memory-limit"] == "skip"
    reasons = {c["id"]: c["reason"] for c in r.report["checks"]}
    assert "limits.cpu" in reasons["six-task/cpu-cap"]
    assert "limits.memory" in reasons["six-task/memory-limit"]
    # Skipped tasks are not even run: no memory hog on a runtime without a memory limit.
    tasks = {t["id"]: t for t in r.report["scenarios"][0]["tasks"]}
    assert not tasks["memory"]["ran"] and tasks["memory"]["steps"] == []
    # certify: a skip is a failure.
    c = sim_run(tmp_path, mirror, env={"SIM_FEATURES": "egress,egress.log,revert"},
                extra=["--profile", "certify"], name="certify")
    assert c.code == 1, c
    assert c.outcomes()["cpu-cap"] == "fail"


def test_expectations_xfail_and_unexpected_pass(tmp_path, mirror):
    exp = tmp_path / "sim.json"
    exp.write_text('{"target": "sim", "expectations": {'
                   '"six-task/clean-after-revert": {"outcome": "fail", "reason": "revert keeps files"}}}')
    r = sim_run(tmp_path, mirror, faults="never-revert", extra=["--expectations", str(exp)])
    assert r.code == 0, r
    assert r.outcomes()["clean-after-revert"] == "xfail"
    assert r.report["expectations"]["count"] == 1
    # The same file against a runtime that reverts: an unexpected pass fails the run.
    x = sim_run(tmp_path, mirror, extra=["--expectations", str(exp)], name="xpass")
    assert x.code == 1, x
    assert x.outcomes()["clean-after-revert"] == "xpass"
    # certify ignores the expectations: the known gap is a failure again.
    c = sim_run(tmp_path, mirror, faults="never-revert", extra=["--expectations", str(exp), "--profile", "certify"],
                name="certify")
    assert c.code == 1 and c.outcomes()["clean-after-revert"] == "fail"


def test_default_expectations_next_to_the_adapter(tmp_path, mirror):
    # adapter:DIR/X finds DIR/../expectations/X.json by itself.
    (tmp_path / "adapters").mkdir()
    (tmp_path / "expectations").mkdir()
    adapter = tmp_path / "adapters" / "mysim"
    adapter.symlink_to(SIM)
    (tmp_path / "expectations" / "mysim.json").write_text(
        '{"expectations": {"six-task/cpu-cap": {"outcome": "fail", "reason": "no cgroups"}}}')
    state = tmp_path / "state"
    state.mkdir()
    from sandcheck_support import FAST, sandcheck
    r = sandcheck(["run", "--target", f"adapter:{adapter}", "--mirror", mirror.address] + FAST,
                  out_dir=tmp_path / "out", env={"SIM_STATE_DIR": str(state), "SIM_FAULTS": "no-cpu-limit"})
    assert r.code == 0, r
    assert r.outcomes()["cpu-cap"] == "xfail"
    assert r.report["expectations"]["file"].endswith("mysim.json")


def test_strict_profile_counts_should_failures(tmp_path, mirror):
    # revert-cost (SHOULD) fails when the target reports a revert time it cannot have taken
    # (longer than the whole call by the harness's clock; issue 32): simulate by a wrapper
    # adapter that answers every revert with 1000 s.
    wrapper = tmp_path / "fake-seconds"
    wrapper.write_text(f"""#!/bin/sh
if [ "$1" = revert ]; then {shlex.quote(str(SIM))} revert >/dev/null && echo '{{"seconds":1000}}'; else exec {shlex.quote(str(SIM))} "$1"; fi
""")
    wrapper.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    from sandcheck_support import FAST, sandcheck
    args = ["run", "--target", f"adapter:{wrapper}", "--mirror", mirror.address] + FAST
    env = {"SIM_STATE_DIR": str(state)}
    d = sandcheck(args, out_dir=tmp_path / "default", env=env)
    assert d.code == 0, d
    assert d.outcomes()["revert-cost"] == "fail"
    s = sandcheck(args + ["--profile", "strict"], out_dir=tmp_path / "strict", env=env)
    assert s.code == 1, s


def test_unknown_backend_skips(tmp_path, mirror):
    r = sim_run(tmp_path, mirror, extra=["--backend", "microvm"])
    assert set(r.outcomes().values()) == {"skip"}
    assert "backend 'microvm'" in r.report["checks"][0]["reason"]
    assert r.report["scenarios"][0]["tasks"][0]["steps"] == []
