"""sandcheck run --repeat N: per check, how often each outcome occurred; an outcome that changed
is `flaky` in the console, report.json, JUnit, Markdown, HTML and TAP, and fails the run.

The runtime is the simulated adapter (a test double) with `flaky-network`: every second sandbox
it makes has no network, so the network checks pass in one run and fail in the next.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / "data"))
from sandcheck_support import sandcheck, sim_run, validate_report, xmllint  # noqa: E402

NETWORK = {"allowed-download", "outside-by-name", "outside-by-ip", "cluster-api-by-name"}


def test_an_outcome_that_changes_is_flaky_everywhere(tmp_path, mirror):
    r = sim_run(tmp_path, mirror, faults="flaky-network", extra=["--repeat", "3", "--tap"], timeout=180)
    assert r.report is not None, r
    validate_report(r.report)
    assert r.report["repeat"] == 3
    by = {c["id"].split("/")[1]: c for c in r.report["checks"]}
    flaky = {k for k, c in by.items() if c["outcome"] == "flaky"}
    assert flaky == NETWORK, {k: c["outcome"] for k, c in by.items()}
    dl = by["allowed-download"]
    # runs 1 and 3 had network (sandboxes 1 and 3), run 2 had none
    assert dl["repeat"]["counts"] == {"pass": 2, "fail": 1}
    assert [p["outcome"] for p in dl["repeat"]["per_run"]] == ["pass", "fail", "pass"]
    assert dl["reason"].startswith("flaky over 3 runs (2 pass, 1 fail); run 2 (fail): ")
    assert dl["blocking"] is True
    # A steady check says so.
    assert by["cpu-cap"]["outcome"] == "pass"
    assert by["cpu-cap"]["repeat"]["counts"] == {"pass": 3}
    assert by["cpu-cap"]["reason"].startswith("pass in each of 3 runs: ")
    assert r.report["summary"]["flaky"] == 4
    assert r.code == 1, r
    # Console: the verdict line and the per-check tally.
    assert "every scenario run 3 times: 4 flaky" in r.out
    assert "flaky (2 pass, 1 fail over 3 runs) (blocking)" in r.out
    # JUnit: a flaky MUST check is a failure of type flaky.
    xmllint(r.out_dir / "junit.xml")
    cases = {tc.get("name"): tc for tc in ET.parse(r.out_dir / "junit.xml").iter("testcase")}
    failure = cases["six-task/allowed-download"].find("failure")
    assert failure is not None and failure.get("type") == "flaky"
    assert cases["six-task/cpu-cap"].find("failure") is None
    md = (r.out_dir / "report.md").read_text()
    assert "every scenario run 3 times: 4 flaky" in md and "flaky (2 pass, 1 fail over 3 runs)" in md
    html = (r.out_dir / "report.html").read_text()
    assert 'class="badge flaky' in html and "2 pass, 1 fail over 3 runs" in html
    tap = (r.out_dir / "report.tap").read_text()
    assert "not ok" in tap


def test_a_steady_run_is_not_flaky(tmp_path, mirror):
    r = sim_run(tmp_path, mirror, faults="", extra=["--repeat", "2"], timeout=120)
    assert r.code == 0, r
    validate_report(r.report)
    assert all(c["outcome"] == "pass" and c["repeat"]["counts"] == {"pass": 2} for c in r.report["checks"])
    assert r.report["summary"]["flaky"] == 0


def test_a_known_flaky_check_is_xfail(tmp_path, mirror):
    exp = tmp_path / "exp.json"
    exp.write_text('{"expectations": {"six-task/allowed-download": {"outcome": "flaky", "reason": "known"},'
                   ' "six-task/outside-by-name": {"outcome": "flaky", "reason": "known"},'
                   ' "six-task/outside-by-ip": {"outcome": "flaky", "reason": "known"},'
                   ' "six-task/cluster-api-by-name": {"outcome": "flaky", "reason": "known"}}}')
    r = sim_run(tmp_path, mirror, faults="flaky-network", extra=["--repeat", "2", "--expectations", str(exp)],
                timeout=120)
    assert r.code == 0, r
    assert r.outcomes()["allowed-download"] == "xfail"


@pytest.mark.parametrize("bad", ["0", "-1", "x", "1001", "2.5"])
def test_bad_repeat_is_usage_error(tmp_path, bad):
    r = sandcheck(["run", "--repeat", bad], out_dir=tmp_path / "o")
    assert r.code == 2, r
    assert "--repeat" in r.err


def test_repeat_does_not_apply_to_nfr(tmp_path):
    r = sandcheck(["run", "--scenario", "nfr", "--repeat", "2"], out_dir=tmp_path / "o")
    assert r.code == 2 and "--samples" in r.err, r
