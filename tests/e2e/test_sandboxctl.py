"""sandboxctl as a user meets it: output, --json, exit codes, bad input (issue 2)."""
import json

from conftest import run


def ctl(bin_dir, *args, **kw):
    return run([str(bin_dir / "sandboxctl"), *args], **kw)


def test_help_and_usage_errors(bin_dir):
    r = ctl(bin_dir, "--help")
    assert r.returncode == 0 and "run [OPTIONS] -- CMD" in r.stdout
    r = ctl(bin_dir)
    assert r.returncode == 2
    r = ctl(bin_dir, "frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr


def test_bad_quantities_are_rejected_with_clear_errors(bin_dir):
    cases = {
        ("--memory", "12XB"): "unknown unit 'XB'",
        ("--cpu", "fast"): "cpu",
        ("--timeout", "-1"): "duration",
        ("--pids", "0"): "at least 1",
        ("--allow", "ftp://x.com"): "http://HOST:PORT",
        ("--allow", "http://203.0.113.7:80"): "not a full host name",
        ("--host", "mirror"): "NAME=ADDR:PORT",
        ("--trust", "maybe"): "trust",
    }
    for (flag, value), needle in cases.items():
        r = ctl(bin_dir, "run", flag, value, "--", "true")
        assert r.returncode == 2, (flag, value, r.stderr)
        assert needle in r.stderr, (flag, value, r.stderr)
        assert "Traceback" not in r.stderr and "terminate" not in r.stderr
    r = ctl(bin_dir, "run", "--memory")
    assert r.returncode == 2 and "needs a value" in r.stderr
    r = ctl(bin_dir, "run", "--json")
    assert r.returncode == 2 and "no command" in r.stderr


def test_run_json_has_the_result_object(bin_dir, root_only):
    r = ctl(bin_dir, "run", "--json", "--cpu", "500m", "--memory", "256Mi", "--", "echo hi; exit 3")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    for key in ("status", "state", "exit", "stdout", "stderr", "seconds", "stages", "usage", "backend"):
        assert key in res, key
    assert res["status"] == "ok" and res["state"] == "RUNNING"
    assert res["exit"] == 3 and res["stdout"] == "hi\n"
    assert res["backend"] == "native"
    assert set(res["stages"]) == {"allocate", "initialize", "inject_context", "execute", "collect",
                                  "destroy", "cleanup"}


def test_argv_form_and_human_output(bin_dir, root_only):
    r = ctl(bin_dir, "run", "--", "echo", "a b", "c")
    assert r.returncode == 0
    assert r.stdout == "a b c\n"
    assert "status=ok" in r.stderr


def test_limits_from_the_cli(bin_dir, root_only):
    r = ctl(bin_dir, "run", "--json", "--memory", "256Mi", "--", "sbx-memhog 640")
    res = json.loads(r.stdout)
    assert r.returncode == 0  # it ran the command, whatever the command did
    assert res["status"] == "resource_exceeded" and res["state"] == "CRASHED"
    r = ctl(bin_dir, "run", "--json", "--timeout", "1", "--", "sleep 1000")
    res = json.loads(r.stdout)
    assert res["status"] == "timeout"
    assert res["seconds"] < 30  # ended at the 1 s timeout, not by the 1000 s sleep


def test_secret_reaches_the_command(bin_dir, root_only):
    r = ctl(bin_dir, "run", "--json", "--secret", "TOKEN=xyzzy42", "--env", "A=1", "--",
            'echo "$TOKEN $A"')
    assert json.loads(r.stdout)["stdout"] == "xyzzy42 1\n"
