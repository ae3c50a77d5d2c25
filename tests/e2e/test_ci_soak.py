"""ci/soak (docs/testing.md, "Soak"): the tally of many runs of one command, its exit status, and
logs that a later soak does not remove. The runs here are trivial commands, not ci/test."""
import os
import re

from conftest import ROOT, run

SOAK = ROOT / "ci/soak"


def soak(tmp_path, *args):
    env = dict(os.environ, SBX_BUILD=str(tmp_path))
    return run([str(SOAK), *args], timeout=60, env=env)


def soak_dirs(tmp_path):
    return sorted(p for p in (tmp_path / "soak").iterdir() if p.is_dir())


def test_every_run_counted_and_its_tests_tallied(tmp_path):
    cmd = "echo '100% tests passed, 0 tests failed out of 7'; echo '==== 5 passed, 2 skipped in 1.0s ===='"
    r = soak(tmp_path, "--runs", "3", "--", "sh", "-c", cmd)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "soak: 3 passed, 0 failed"
    [logs] = soak_dirs(tmp_path)
    assert sorted(p.name for p in logs.glob("run-*.log")) == ["run-1.log", "run-2.log", "run-3.log"]
    summary = (logs / "summary.txt").read_text().splitlines()
    # Runs in any order (several streams may report); each with its time and its tallies.
    assert sorted(re.sub(r"in \d+ s", "in T s", l) for l in summary[:3]) == [
        f"run {k}: pass in T s (0 tests failed out of 7;5 passed, 2 skipped)" for k in (1, 2, 3)]
    assert summary[-1] == "soak: 3 passed, 0 failed"


def test_a_failed_run_fails_the_soak_and_stop_on_fail_starts_no_more(tmp_path):
    # Run 1 fails (its marker does not exist yet); with --stop-on-fail, runs 2 and 3 never start.
    marker = tmp_path / "ran"
    r = soak(tmp_path, "--runs", "3", "--stop-on-fail", "--", "sh", "-c",
             f"echo x >> {marker}; test $(wc -l < {marker}) -gt 1")
    assert r.returncode == 1, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "soak: 0 passed, 1 failed"
    assert marker.read_text().count("x") == 1
    assert "run 1/3: FAIL" in r.stderr and "run-1.log" in r.stderr


def test_a_later_soak_keeps_the_earlier_logs(tmp_path):
    assert soak(tmp_path, "--runs", "1", "--", "true").returncode == 0
    assert soak(tmp_path, "--runs", "1", "--", "true").returncode == 0
    dirs = soak_dirs(tmp_path)
    assert len(dirs) == 2 and all((d / "run-1.log").exists() for d in dirs), dirs


def test_bad_usage_is_exit_2_and_help_is_the_header(tmp_path):
    for args in (["--runs", "0"], ["--runs", "x"], ["--jobs", "10"], ["--bogus"]):
        r = soak(tmp_path, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("ci/soak: "), r.stderr
    h = soak(tmp_path, "--help")
    assert h.returncode == 0 and "usage: ci/soak" in h.stdout
    assert "set -uo" not in h.stdout  # the comment block only, not the script after it
    assert not (tmp_path / "soak").exists()  # nothing ran
