"""bench/compare (sbx-bench-compare): the A/B comparison of two Google Benchmark JSON runs with a
noise threshold — verdicts, the overlap rule for repetitions, NaN aggregates, bad input."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("SBX_BUILD", ROOT / "build"))
COMPARE = ROOT / "bench" / "compare"


def run(*args):
    env = dict(os.environ, SBX_BUILD=str(BUILD))
    return subprocess.run([str(COMPARE), *map(str, args)], capture_output=True, text=True, timeout=30, env=env)


def bench_json(path, runs, unit="ns", extra=None):
    """runs: {name: [real_time, ...]} as iteration runs (repetitions)."""
    out = []
    for name, times in runs.items():
        for i, t in enumerate(times):
            out.append({"name": name, "run_name": name, "run_type": "iteration", "repetitions": len(times),
                        "repetition_index": i, "iterations": 100, "real_time": t, "cpu_time": t,
                        "time_unit": unit})
    doc = {"context": {"host_name": "vm"}, "benchmarks": out + (extra or [])}
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module", autouse=True)
def built():
    if not (BUILD / "bin" / "sbx-bench-compare").exists():
        pytest.fail(f"build first: {BUILD}/bin/sbx-bench-compare missing")


def test_verdicts_beyond_the_threshold(tmp_path):
    a = bench_json(tmp_path / "a.json", {"BM_Fast": [100], "BM_Same": [100], "BM_Slow": [100], "BM_Gone": [5]})
    b = bench_json(tmp_path / "b.json", {"BM_Fast": [80], "BM_Same": [104], "BM_Slow": [130], "BM_New": [7]})
    r = run(a, b, "--threshold", "5%")
    assert r.returncode == 0, r.stderr
    rows = {line.split("|")[1].strip(): line for line in r.stdout.splitlines() if line.startswith("| BM_")}
    assert "faster" in rows["BM_Fast"]
    assert "same" in rows["BM_Same"]
    assert "**slower**" in rows["BM_Slow"] and "1.300" in rows["BM_Slow"]
    assert "only in A" in rows["BM_Gone"] and "only in B" in rows["BM_New"]
    assert run(a, b, "--fail-on-regression").returncode == 1
    assert run(a, b, "--threshold", "40%", "--fail-on-regression").returncode == 0


def test_overlapping_repetitions_are_noise(tmp_path):
    # Medians differ by 20 %, but one noisy repetition makes the ranges overlap: no verdict.
    a = bench_json(tmp_path / "a.json", {"BM_X": [100, 101, 99, 130]})
    b = bench_json(tmp_path / "b.json", {"BM_X": [120, 121, 119, 122]})
    r = run(a, b, "--fail-on-regression")
    assert r.returncode == 0, r.stdout
    assert "ranges overlap" in r.stdout
    # Without the overlap it is a regression.
    b2 = bench_json(tmp_path / "b2.json", {"BM_X": [140, 141, 139, 142]})
    assert run(a, b2, "--fail-on-regression").returncode == 1


def test_units_nan_aggregates_and_errors(tmp_path):
    a = bench_json(tmp_path / "a.json", {"BM_U": [1.0]}, unit="ms")
    b = bench_json(tmp_path / "b.json", {"BM_U": [1000.0]}, unit="us")  # the same time
    text = b.read_text().replace('"benchmarks": [', '"benchmarks": [{"name": "BM_Err", "run_name": "BM_Err", '
                                 '"error_occurred": true, "real_time": 0, "cpu_time": 0, "time_unit": "ns"}, ', 1)
    # A NaN aggregate as Google Benchmark writes it (not valid JSON).
    text = text.replace('"context": {', '"context": {"x": NaN, ', 1)
    b.write_text(text)
    r = run(a, b)
    assert r.returncode == 0, r.stderr
    assert "| BM_U |" in r.stdout and "same" in r.stdout
    assert "BM_Err" not in r.stdout


@pytest.mark.parametrize("args", [["only-one.json"], ["a", "b", "--threshold", "10"], ["a", "b", "--metric", "wall"],
                                  ["a", "b", "--bogus"]])
def test_bad_usage_is_exit_2(tmp_path, args):
    good = bench_json(tmp_path / "g.json", {"BM": [1]})
    args = [str(good) if x in ("a", "b") else x for x in args]
    assert run(*args).returncode == 2


def test_not_benchmark_json_is_exit_2(tmp_path):
    good = bench_json(tmp_path / "g.json", {"BM": [1]})
    (tmp_path / "x.json").write_text('{"measurements": []}')
    assert run(good, tmp_path / "x.json").returncode == 2
    assert run(good, tmp_path / "missing.json").returncode == 2
