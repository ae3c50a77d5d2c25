"""Egress through a real sandbox of the reference runtime, with busybox inside (issue 3):
the demo's four network tasks byte for byte, escape attempts, and the empty policy."""
import json
import subprocess

import pytest

from conftest import BIN, ROOT, run

MIRROR = "pkg-mirror.demo-tools.svc.cluster.local"


@pytest.fixture(scope="module")
def mirror():
    p = subprocess.Popen([str(BIN / "sbx-mirror"), "--listen", "127.0.0.1:0", "--root",
                          str(ROOT / "fixtures/mirror/content"), "--exit-on-stdin-eof"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line.startswith("listening "), line
    yield line.split()[1]
    p.stdin.close()
    p.wait(timeout=10)


def sandbox(mirror_addr, cmd, policy=True, timeout="20"):
    args = [str(BIN / "sandboxctl"), "run", "--json", "--timeout", timeout]
    if policy:
        args += ["--allow", f"http://{MIRROR}:80", "--host", f"{MIRROR}={mirror_addr}"]
    r = run(args + ["--", cmd])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_allowed_download(mirror, root_only):
    r = sandbox(mirror, f"wget -q -O hello.txt http://{MIRROR}/hello-1.0.txt && cat hello.txt")
    assert r["exit"] == 0 and r["stdout"] == "hello package 1.0\n", r


def test_outside_by_name_is_nxdomain(mirror, root_only):
    r = sandbox(mirror, "nslookup example.com; wget http://example.com/; echo wget_exit=$?")
    assert "** server can't find example.com: NXDOMAIN" in r["stdout"]
    assert "wget: bad address 'example.com'\n" in r["stderr"]
    assert "wget_exit=1" in r["stdout"]


def test_outside_by_ip_meets_the_gateway(mirror, root_only):
    r = sandbox(mirror, "wget http://203.0.113.7/; echo wget_exit=$?")
    assert "wget: server returned error: HTTP/1.1 403 Forbidden\n" in r["stderr"], r
    # The allowed mirror's own address (what its name resolves to in the sandbox) gets the same
    # answer as an address that exists nowhere: nobody can learn whether an address exists.
    r2 = sandbox(mirror, f"A=$(nslookup {MIRROR} | awk '/^Address/ {{a=$NF}} END {{print a}}'); echo addr=$A;"
                         "wget http://$A/hello-1.0.txt; wget http://10.1.2.3/; wget http://169.254.169.254/")
    assert "addr=" in r2["stdout"] and "addr=\n" not in r2["stdout"], r2
    assert r2["stderr"].count("HTTP/1.1 403 Forbidden") == 3, r2
    assert "hello package" not in r2["stdout"]


def test_cluster_api_by_name_is_not_resolved(mirror, root_only):
    r = sandbox(mirror, "wget http://kubernetes.default.svc.cluster.local/; echo wget_exit=$?")
    assert "wget: bad address 'kubernetes.default.svc.cluster.local'\n" in r["stderr"]


def test_escape_attempts_fail(mirror, root_only):
    cmds = {
        "subdomain": f"wget -q -O- http://x.{MIRROR}/hello-1.0.txt",
        "other resolver": "nslookup example.com 8.8.8.8",
        "tcp 443 by ip": "echo x | nc -w 2 203.0.113.7 443 | wc -c | grep -qx 0 && exit 9",
        "ping": "ping -c 1 -W 1 203.0.113.7",
        "ipv6": "wget -q -O- http://[2001:db8::1]/",
        "wrong port": f"wget -q -O- http://{MIRROR}:8080/hello-1.0.txt",
    }
    for what, cmd in cmds.items():
        r = sandbox(mirror, cmd, timeout="30")
        # exit 9 = the connection was reset with no byte back (raw TCP meets the gateway)
        assert r["exit"] != 0, (what, r)
        assert "hello package" not in r["stdout"], what
        # Fails fast, does not hang: it ended by itself, not at the sandbox's timeout (the bound
        # below leaves a loaded machine room and still catches a wait for a network timeout).
        assert r["status"] != "timeout", (what, "hung until the timeout", r)
        assert r["seconds"] < 20, (what, "should fail fast, not hang", r["seconds"])


def test_no_policy_reaches_nothing(mirror, root_only):
    # SNAP-5: without a policy even the mirror is unreachable, and the only interface is lo.
    r = sandbox(mirror, f"wget -q -O- http://{MIRROR}/hello-1.0.txt; wget -q -O- http://{mirror}/hello-1.0.txt;"
                        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", policy=False)
    assert "hello package" not in r["stdout"]
    assert r["stdout"].strip().splitlines()[-1] == "lo"
