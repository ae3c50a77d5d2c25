"""sandcheck run --backend wasm against the reference runtime (BK-2, issue 13).

A WASI module has no shell, no processes and no network, so the built-in scenarios carry a wasm
overlay (docs/scenarios.md "Backend overlays"): the commands a module can run (the fixture tools
module's tools), and a skip with the reason for every task that cannot apply there. Every check
that can run must pass, and a check that cannot must be a skip that says why, never a pass.
Requirement IDs: ../shared/design/requirements.md.
"""
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / "data"))
from sandcheck_support import BUILD, sandcheck, validate_report  # noqa: E402

# The checks the wasm overlays run; everything else of these scenarios must be a skip.
RUN_ON_WASM = {
    "six-task/cpu-cap", "six-task/memory-limit", "six-task/clean-after-revert", "six-task/revert-cost",
    "failure/cannot-execute", "failure/tool-crash", "failure/stages-reported",
    "failure/clean-after-revert",
    "isolation/host-files-hidden", "isolation/system-read-only", "isolation/pid-namespace",
    "isolation/runs-in-work", "isolation/host-environment-hidden", "isolation/traces-written",
    "isolation/nothing-persists", "isolation/environment-set", "isolation/secret-in-memory",
    "isolation/secret-not-shared", "isolation/output-collected", "isolation/clean-after-revert",
    "limits/disk-quota", "limits/timeout", "limits/clean-after-revert",
}
SCENARIOS = ["six-task", "egress", "failure", "isolation", "limits", "pool"]


@pytest.fixture(scope="module")
def wasm():
    if os.geteuid() != 0:
        pytest.skip("LOUD SKIP: the reference runtime needs root")
    if not (BUILD / "tools" / "sbx-wasm-host-tools").exists():
        if os.environ.get("SBX_WASM_MUST_WORK") == "1":
            pytest.fail("the wasm fixture module was not built (wabt, wasi-libc missing?)")
        pytest.skip("LOUD SKIP: the wasm fixture module was not built")


def test_every_applicable_check_passes_and_the_rest_say_why(tmp_path, wasm):
    args = ["run", "--backend", "wasm"]
    for s in SCENARIOS:
        args += ["--scenario", s]
    res = sandcheck(args, out_dir=tmp_path / "out", timeout=240)
    assert res.report is not None, res
    checks = {c["id"]: c for c in res.report["checks"]}
    assert res.code == 0, res
    passed = {k for k, c in checks.items() if c["outcome"] == "pass"}
    assert passed == RUN_ON_WASM, res
    for k, c in checks.items():
        if k in RUN_ON_WASM:
            continue
        assert c["outcome"] == "skip", (k, c["outcome"])
        # the overlay's reason, not a generic one
        assert c["reason"].startswith("not run on the wasm backend: "), (k, c["reason"])
    # The revert check names the canaries a module could plant, and those it could not.
    reason = checks["isolation/clean-after-revert"]["reason"]
    assert "(work-hidden-file, work-hidden-dir) was gone after" in reason, reason
    assert "process (ENOSYS)" in reason, reason
    # The sandboxes really were wasm ones.
    tool_crash = checks["failure/tool-crash"]
    assert "wasm: trap" in tool_crash["reason"], tool_crash
    validate_report(res.report)


def test_other_backends_ignore_the_wasm_overlay(tmp_path, wasm):
    # The same scenario file on native runs its shell commands (a skip there would be a bug).
    res = sandcheck(["run", "--backend", "native", "--scenario", "failure"],
                    out_dir=tmp_path / "out", timeout=120)
    assert res.code == 0, res
    outcomes = {c["id"]: c["outcome"] for c in res.report["checks"]}
    assert set(outcomes.values()) == {"pass"}, outcomes
    crash = next(c for c in res.report["checks"] if c["id"] == "failure/tool-crash")
    assert "Segmentation fault" in crash["reason"], crash
