"""sandboxctl --server: persistent sandboxes in sandboxd, as the demo's actor (issue 4)."""
import json
import os
import pathlib
import subprocess
import tempfile
import time

import pytest

from conftest import BIN, run


@pytest.fixture()
def daemon(root_only):
    d = tempfile.mkdtemp(prefix="sbx-ctl-")
    cfg = os.path.join(d, "config.json")
    sock = os.path.join(d, "sandboxd.sock")
    with open(cfg, "w") as f:
        json.dump({"tenants": {"alice": {"token": "alice-token-0123456789"},
                               "bob": {"token": "bob-token-0123456789"}}}, f)
    # Its log (one line per request) goes to a file beside the socket: read by the tests, and a
    # pipe nobody reads could fill and stop the daemon.
    log = open(os.path.join(d, "sandboxd.log"), "w")
    p = subprocess.Popen([str(BIN / "sandboxd"), "--config", cfg, "--socket", sock],
                         stderr=log, text=True)
    deadline = time.monotonic() + 60  # the socket appears once the daemon is ready
    while not os.path.exists(sock) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.path.exists(sock), f"sandboxd not ready (exit {p.poll()})"
    yield "unix:" + sock
    p.terminate()
    assert p.wait(timeout=30) == 0
    log.close()


def requests_logged(server):
    """The request lines of the daemon's log so far ("POST /v1/run tenant=alice status=200 …")."""
    log = pathlib.Path(server[len("unix:"):]).with_name("sandboxd.log")
    return [line for line in log.read_text().splitlines() if " /v1/" in line]


def ctl(server, token, *args):
    env = dict(os.environ, SANDBOXCTL_SERVER=server, SANDBOXD_TOKEN=token)
    return run([str(BIN / "sandboxctl"), *args], env=env)


def test_create_exec_revert_destroy(daemon):
    r = ctl(daemon, "alice-token-0123456789", "create", "--memory", "256Mi", "--cpu", "500m")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip().splitlines()[-1]
    r = ctl(daemon, "alice-token-0123456789", "exec", "--json", sid, "--", "echo x > /work/f; (sleep 999 &); ls /work")
    res = json.loads(r.stdout)
    assert res["status"] == "ok" and res["stdout"] == "f\n" and res["backend"] == "native"
    # the sandbox lives between calls
    r = ctl(daemon, "alice-token-0123456789", "exec", "--json", sid, "--", "cat /work/f")
    assert json.loads(r.stdout)["stdout"] == "x\n"
    assert sid in ctl(daemon, "alice-token-0123456789", "list").stdout
    r = ctl(daemon, "alice-token-0123456789", "revert", sid)
    assert r.returncode == 0 and "reverted" in r.stdout
    r = ctl(daemon, "alice-token-0123456789", "exec", "--json", sid, "--",
            "find /work -mindepth 1 | wc -l; ps -o comm | grep -c sleep")
    assert json.loads(r.stdout)["stdout"] == "0\n0\n"
    # a crashed sandbox reports CRASHED and is usable again after a revert
    r = ctl(daemon, "alice-token-0123456789", "exec", "--json", sid, "--", "sbx-memhog 640")
    assert json.loads(r.stdout)["state"] == "CRASHED"
    assert ctl(daemon, "alice-token-0123456789", "revert", sid).returncode == 0
    r = ctl(daemon, "alice-token-0123456789", "exec", "--json", sid, "--", "echo ok")
    assert json.loads(r.stdout)["stdout"] == "ok\n"
    assert ctl(daemon, "alice-token-0123456789", "destroy", sid).returncode == 0
    r = ctl(daemon, "alice-token-0123456789", "exec", sid, "--", "true")
    assert r.returncode == 2 and "not_found" in r.stderr


def test_tenants_and_tokens(daemon):
    sid = ctl(daemon, "alice-token-0123456789", "create").stdout.strip().splitlines()[-1]
    # PROD-1: bob cannot see or use alice's sandbox; it looks like no sandbox at all
    assert sid not in ctl(daemon, "bob-token-0123456789", "list").stdout
    for args in (("exec", sid, "--", "true"), ("revert", sid), ("destroy", sid)):
        r = ctl(daemon, "bob-token-0123456789", *args)
        assert r.returncode == 2 and "not_found" in r.stderr, (args, r.stderr)
    r = ctl(daemon, "wrong-token-0123456789", "list")
    assert r.returncode == 3 and "unauthenticated" in r.stderr
    assert ctl(daemon, "alice-token-0123456789", "destroy", sid).returncode == 0


def test_persistent_commands_need_a_server(bin_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOXCTL_SERVER", "SANDBOXD_TOKEN")}
    r = run([str(bin_dir / "sandboxctl"), "create"], env=env)
    assert r.returncode == 2 and "--server" in r.stderr


def test_run_through_the_daemon_is_one_request_and_its_failures_are_still_environment_failures(
        daemon, tmp_path):
    # Issue 16: `sandboxctl --server … run` sends the run and nothing before it (no GET /v1/info
    # on the way: a round trip of a one-shot command's cost); the daemon's log shows each request.
    before = len(requests_logged(daemon))
    r = ctl(daemon, "alice-token-0123456789", "run", "--json", "--", "echo hi")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stdout"] == "hi\n"
    # The daemon logs each request before it answers it.
    new = requests_logged(daemon)[before:]
    assert len(new) == 1 and "POST /v1/run" in new[0], new
    # A wrong token and an absent daemon are found out after the failed run, and reported as
    # before: environment failures (exit 3) naming the cause, not "sandbox unavailable" (4).
    r = ctl(daemon, "mallory-token-0123456789", "run", "--", "true")
    assert r.returncode == 3 and "unauthenticated" in r.stderr, (r.returncode, r.stderr)
    r = ctl("unix:" + str(tmp_path / "nobody.sock"), "alice-token-0123456789", "run", "--", "true")
    assert r.returncode == 3 and "sandbox_unavailable" in r.stderr, (r.returncode, r.stderr)


def test_the_cli_maps_no_runtime_library_until_it_runs_in_process(bin_dir, tmp_path):
    # sandboxctl links the Execution API's client only; the runtime (nftables, ldns, OpenSSL,
    # seccomp, libcgroup) is libsbx-runtime.so in ../lib, loaded for an in-process command.
    out = subprocess.run(["ldd", str(bin_dir / "sandboxctl")], capture_output=True, text=True).stdout
    for lib in ("libnftables", "libldns", "libcrypto", "libseccomp", "libcgroup", "libssl"):
        assert lib not in out, out
    assert (bin_dir.parent / "lib/libsbx-runtime.so").exists()
    # Without the module next to it, an in-process command is a clear environment failure.
    lone = tmp_path / "bin"
    lone.mkdir()
    (lone / "sandboxctl").write_bytes((bin_dir / "sandboxctl").read_bytes())
    (lone / "sandboxctl").chmod(0o755)
    r = run([str(lone / "sandboxctl"), "run", "--", "true"])
    assert r.returncode == 3 and "cannot load the runtime" in r.stderr, (r.returncode, r.stderr)
    r = run([str(lone / "sandboxctl"), "help"])
    assert r.returncode == 0
