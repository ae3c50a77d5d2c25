"""sandboxctl --server: persistent sandboxes in sandboxd, as the demo's actor (issue 4)."""
import json
import os
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
    p = subprocess.Popen([str(BIN / "sandboxd"), "--config", cfg, "--socket", sock],
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60  # the socket appears once the daemon is ready
    while not os.path.exists(sock) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.path.exists(sock), f"sandboxd not ready (exit {p.poll()})"
    yield "unix:" + sock
    p.terminate()
    assert p.wait(timeout=30) == 0


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
