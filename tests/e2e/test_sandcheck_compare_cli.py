"""`sandcheck compare`'s command-line table (issue 16, NFR-1; docs/performance.md): one command from
the command line side by side with bwrap and runsc do, and each container backend's bare runtime
CLI exec measured in the same run; nothing the harness started for it is left behind."""
import json
import os
import pathlib

import pytest

from conftest import ROOT, run

SANDCHECK = ROOT / "build/bin/sandcheck"


def _warm_start_only(tmp_path):
    # The latency-target file cut to warm-start (the table under test comes after the targets).
    d = json.loads((ROOT / "scenarios/nfr.json").read_text())
    d["targets"] = [t for t in d["targets"] if t["id"] == "warm-start"]
    d["measurements"] = []
    d["floor"]["samples"] = 20
    p = tmp_path / "nfr-warm.json"
    p.write_text(json.dumps(d))
    return p


def _processes_naming(fragment):
    found = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if fragment in (p / "cmdline").read_bytes().decode(errors="replace"):
                found.append(p.name)
        except OSError:
            pass
    return found


def test_the_table_is_measured_and_nothing_is_left(root_only, bin_dir, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    before = sorted(pathlib.Path("/var/tmp").glob("sandcheck-cli-*"))
    out = tmp_path / "out"
    r = run([str(SANDCHECK), "compare", "--target", "reference#native", "--samples", "3",
             "--cli-rounds", "2", "--scenario", str(_warm_start_only(tmp_path)), "--out", str(out)],
            timeout=600, env=dict(os.environ, TMPDIR=str(scratch)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    c = json.loads((out / "comparison.json").read_text())["command_lines"]
    rows = {row["id"]: row for row in c["rows"]}
    # Every row this host can run is measured twice; a row that is not says why.
    for need in ("fork-exec", "bwrap", "sandboxctl-info", "sandboxctl-run", "sandboxctl-server-run"):
        assert rows[need].get("count") == 2, rows[need]
    for maybe in ("runsc-do", "crun-exec", "runsc-exec"):
        assert rows[maybe].get("count") == 2 or rows[maybe]["skip"], rows[maybe]
    # On this machine kind crun and runsc are installed: their floors must really run.
    if os.path.exists("/usr/bin/crun"):
        assert rows["crun-exec"].get("count") == 2, rows["crun-exec"].get("skip")
    if os.path.exists("/usr/bin/runsc"):
        assert rows["runsc-exec"].get("count") == 2, rows["runsc-exec"].get("skip")
    assert rows["sandboxctl-run"]["p50_over_bwrap"] > 0
    assert [g["goal"] for g in c["goals"]][0].startswith("`sandboxctl run -- true`")
    # The same command through a sandboxd the harness started (and stopped: its command line
    # names the scratch directory, so the process check below covers it and its sandboxes'
    # supervisor; a sandbox's own processes die with their supervisor).
    assert rows["sandboxctl-server-run"]["label"].startswith("sandboxctl --server (local sandboxd)")
    assert any(g["goal"].startswith("`sandboxctl --server`") for g in c["goals"]), c["goals"]
    md = (out / "comparison.md").read_text()
    assert "### One command from the command line, and the runtime CLI floors" in md
    assert "| `crun exec ID /bin/true` |" in md or "crun exec ID /bin/true`: " in md
    assert "One command from the command line" in (out / "comparison.html").read_text()
    # The floor containers, their runtimes and the scratch directory are gone; nothing was put
    # in the caller's TMPDIR (runsc do leaves an empty directory there: removed).
    assert sorted(pathlib.Path("/var/tmp").glob("sandcheck-cli-*")) == before
    assert _processes_naming("/sandcheck-cli-") == []
    assert list(scratch.iterdir()) == []


def test_the_table_can_be_left_out_and_bad_rounds_are_usage_errors(root_only, tmp_path):
    r = run([str(SANDCHECK), "compare", "--cli-rounds", "many"])
    assert r.returncode == 2 and "--cli-rounds" in r.stderr, r.stderr
    r = run([str(SANDCHECK), "compare", "--cli-rounds", "-1"])
    assert r.returncode == 2, r.stderr
    out = tmp_path / "out"
    r = run([str(SANDCHECK), "compare", "--target", "reference#native", "--samples", "2",
             "--cli-rounds", "0", "--scenario", str(_warm_start_only(tmp_path)), "--out", str(out)],
            timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "comparison.json").read_text())["command_lines"] is None
    assert "One command from the command line" not in (out / "comparison.md").read_text()
