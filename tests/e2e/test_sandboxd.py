"""sandboxd as an operator runs it and a client meets it (issue 4, PROD-1): the built daemon with a
temporary config, spoken to over its unix socket and over TCP loopback with Python's http.client.
Checks authentication, tenant isolation, bad requests, exit codes, and a clean SIGTERM (exit 0,
socket removed, no sandbox process or cgroup left)."""
import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import BIN, run

ALICE = "alice-e2e-token-0123456789"
BOB = "bob-e2e-token-0123456789abcdef"


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket (the daemon's default transport)."""

    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def sandboxd_path():
    p = BIN / "sandboxd"
    if not p.exists():
        pytest.fail(f"build first: {p} missing")
    return p


def write_config(directory, **extra):
    cfg = {"tenants": {"alice": {"token": ALICE}, "bob": {"token_file": "bob.token", "max_sandboxes": 3}}}
    cfg.update(extra)
    token = pathlib.Path(directory, "bob.token")
    token.write_text(BOB + "\n")
    token.chmod(0o600)
    path = pathlib.Path(directory, "sandboxd.json")
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    return path


def children_of(pid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
        except OSError:
            pass
    return out


def wait_gone(pid, inits, timeout=60):
    """Waits until the daemon `pid`'s cgroups and sandbox inits are gone (at once when they are;
    what is left waits it out). Inits re-parented to init are reaped by it a moment later."""
    deadline = time.time() + timeout
    while time.time() < deadline and (cgroups_of(pid) or [p for p in inits if os.path.exists(f"/proc/{p}")]):
        time.sleep(0.05)


def descendants_running(pid, needle):
    """True if a process below `pid` has `needle` in its command line."""
    parent, cmd = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            pass
    for p, c in cmd.items():
        if needle not in c:
            continue
        q = p
        while q in parent and q > 1:
            q = parent[q]
            if q == pid:
                return True
    return False


def cgroups_of(pid):
    """Cgroups the daemon's runtime made: named sandcheck-<pid>-<suffix>."""
    found = []
    for ctl in ("cpu", "cpuacct", "memory", "pids", "freezer", "unified"):
        for dirpath, dirnames, _ in os.walk(f"/sys/fs/cgroup/{ctl}"):
            found += [os.path.join(dirpath, d) for d in dirnames if d.startswith(f"sandcheck-{pid}-")]
    return found


class Daemon:
    def __init__(self, directory, args):
        self.log_path = pathlib.Path(directory, "sandboxd.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([str(sandboxd_path()), *args], stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, check, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"sandboxd exited {self.proc.returncode}: {self.log_path.read_text()}")
            if check():
                return
            time.sleep(0.05)
        pytest.fail(f"sandboxd not ready: {self.log_path.read_text()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()
        return rc

    def text(self):
        return self.log_path.read_text()


@pytest.fixture
def tmp():
    with tempfile.TemporaryDirectory(prefix="sandboxd-e2e-") as d:
        yield d


@pytest.fixture
def unix_daemon(tmp, root_only):
    sock = os.path.join(tmp, "run", "sandboxd.sock")
    d = Daemon(tmp, ["--config", str(write_config(tmp)), "--socket", sock])
    d.wait_ready(lambda: os.path.exists(sock))
    d.sock = sock
    yield d
    d.stop()


def call(conn_factory, method, path, body=None, token=ALICE, raw=None, headers=None):
    """One request on a fresh connection; returns (status, headers, parsed JSON or raw bytes)."""
    conn = conn_factory()
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    payload = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    if payload is not None:
        hdrs["Content-Type"] = "application/json"
    conn.request(method, path, body=payload, headers=hdrs)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = data
    return resp.status, resp.headers, parsed


def lifecycle_and_isolation(factory):
    # Authentication: nothing without the right token, not even the route list.
    for token in (None, "alice-e2e-token-0123456780", "Basic"):
        status, headers, body = call(factory, "GET", "/v1/info", token=token)
        assert status == 401, token
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert body["error"]["code"] == "unauthenticated"
    status, _, info = call(factory, "GET", "/v1/info")
    assert status == 200 and info["tenant"] == "alice" and "tenants" in info["features"]

    # Lifecycle.
    status, headers, body = call(factory, "POST", "/v1/sandboxes", {"template": "sandbox"})
    assert status == 201, body
    sid = body["sandbox"]
    assert headers["Location"] == f"/v1/sandboxes/{sid}"
    status, _, res = call(factory, "POST", f"/v1/sandboxes/{sid}/exec",
                          {"cmd": "echo secret-of-alice > /work/canary; cat /work/canary", "timeout_s": 10})
    assert status == 200 and res["status"] == "ok" and res["stdout"] == "secret-of-alice\n", res
    status, _, res = call(factory, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "exit 9"})
    assert status == 200 and res["exit"] == 9  # the command failed; the call did not

    # Bob: cannot see, exec in, revert or delete alice's sandbox; answered as for no sandbox.
    ghost = "sb000000000000"
    for method, suffix, body in [("GET", "", None), ("POST", "/exec", {"cmd": "cat /work/canary"}),
                                 ("POST", "/revert", None), ("POST", "/suspend", None),
                                 ("DELETE", "", None), ("GET", "/gateway-log", None)]:
        theirs = call(factory, method, f"/v1/sandboxes/{sid}{suffix}", body, token=BOB)
        none = call(factory, method, f"/v1/sandboxes/{ghost}{suffix}", body, token=BOB)
        assert theirs[0] == none[0] == 404, (method, suffix)
        assert json.dumps(theirs[2]).replace(sid, ghost) == json.dumps(none[2]), (method, suffix)
    status, _, listing = call(factory, "GET", "/v1/sandboxes", token=BOB)
    assert status == 200 and listing["sandboxes"] == []
    status, _, res = call(factory, "POST", "/v1/sandboxes", {"tenant": "alice"}, token=BOB)
    assert status == 403 and res["error"]["code"] == "permission_denied"
    # Alice's canary survived all of that (no revert, no exec by bob).
    status, _, res = call(factory, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "cat /work/canary"})
    assert res["stdout"] == "secret-of-alice\n"

    # Bad requests: 400 with a stable code, and the server goes on.
    for raw in (b"{not json", b"[1]", b'{"cmd":"ls","unknown":1}', b'{"cmd":"ls","timeout_s":-3}',
                b'{"cmd":"\xff"}', b"[" * 100000):
        status, _, res = call(factory, "POST", f"/v1/sandboxes/{sid}/exec", raw=raw)
        assert status == 400 and res["error"]["code"] == "invalid_argument", (raw[:20], res)
    status, _, res = call(factory, "POST", "/v1/sandboxes", {"template": "sandbox", "privileged": True})
    assert status == 400 and "privileged" in res["error"]["message"]
    status, _, res = call(factory, "GET", "/v1/nothing")
    assert status == 404
    status, headers, res = call(factory, "PUT", "/v1/sandboxes")
    assert status == 405 and headers["Allow"] == "GET, POST"

    # Revert empties /work; delete ends it.
    status, _, res = call(factory, "POST", f"/v1/sandboxes/{sid}/revert")
    assert status == 200 and res["seconds"] >= 0
    status, _, res = call(factory, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "ls -A /work"})
    assert res["stdout"] == ""
    status, _, res = call(factory, "DELETE", f"/v1/sandboxes/{sid}")
    assert status == 200
    status, _, res = call(factory, "DELETE", f"/v1/sandboxes/{sid}")
    assert status == 404


def raw_exchange(connect, data, half_close=False):
    s = connect()
    s.settimeout(10)
    try:
        s.sendall(data)
    except OSError:
        pass
    if half_close:
        s.shutdown(socket.SHUT_WR)
    chunks = []
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            chunks.append(c)
    except OSError:
        pass
    s.close()
    return b"".join(chunks)


def garbage_keeps_serving(factory, connect):
    auth = f"Authorization: Bearer {ALICE}\r\n".encode()
    cases = [
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", b"400"),
        (b"GET /v1/info HTTP/1.1\r\nHost: x\r\n" + auth + b"X: " + b"a" * 20000 + b"\r\n\r\n", b"431"),
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 9000000\r\n\r\n", b"413"),
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         b"411"),
        (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 40\r\n\r\n{\"tem", None),
    ]
    for data, expected in cases:
        got = raw_exchange(connect, data, half_close=expected is None)
        if expected is None:
            assert got == b""  # a truncated request gets no answer, only a close
        else:
            assert got.startswith(b"HTTP/1.1 " + expected), got[:100]
        assert call(factory, "GET", "/v1/info")[0] == 200


def test_unix_socket_end_to_end(unix_daemon):
    st = os.stat(unix_daemon.sock)
    assert oct(st.st_mode & 0o777) == "0o660"
    factory = lambda: UnixHTTPConnection(unix_daemon.sock)  # noqa: E731

    def connect():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(unix_daemon.sock)
        return s

    lifecycle_and_isolation(factory)
    garbage_keeps_serving(factory, connect)

    # Bob's quota (max_sandboxes 3) is enforced with 429 resource_exceeded.
    ids = []
    for _ in range(3):
        status, _, body = call(factory, "POST", "/v1/sandboxes", {}, token=BOB)
        assert status == 201, body
        ids.append(body["sandbox"])
    status, _, body = call(factory, "POST", "/v1/sandboxes", {}, token=BOB)
    assert status == 429 and body["error"]["code"] == "resource_exceeded"

    # 8 parallel clients, each its own sandbox, all at once.
    errors = []

    def client(i):
        try:
            status, _, body = call(factory, "POST", "/v1/sandboxes", {})
            assert status == 201, body
            sid = body["sandbox"]
            status, _, res = call(factory, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": f"echo {i}"})
            assert status == 200 and res["stdout"] == f"{i}\n", res
            assert call(factory, "POST", f"/v1/sandboxes/{sid}/revert")[0] == 200
            assert call(factory, "DELETE", f"/v1/sandboxes/{sid}")[0] == 200
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    # Leave bob's three (with a process each) for the shutdown to reclaim.
    for sid in ids:
        call(factory, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "sleep 300 >/dev/null 2>&1 &"}, token=BOB)
    pid = unix_daemon.proc.pid
    inits = children_of(pid)
    assert len(inits) >= 3 and cgroups_of(pid)
    rc = unix_daemon.stop()
    assert rc == 0, unix_daemon.text()
    assert not os.path.exists(unix_daemon.sock)
    wait_gone(pid, inits)
    assert [p for p in inits if os.path.exists(f"/proc/{p}")] == []
    assert cgroups_of(pid) == []
    log = unix_daemon.text()
    assert "SIGTERM: stopping; 3 sandboxes to destroy" in log and "stopped" in log
    # The access log names method, path, tenant and status, and never a token or a body.
    assert "POST /v1/sandboxes tenant=bob status=201" in log
    assert ALICE not in log and BOB not in log and "secret-of-alice" not in log


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_tcp_loopback_end_to_end(tmp, root_only):
    port = free_port()
    d = Daemon(tmp, ["--config", str(write_config(tmp)), "--listen", f"127.0.0.1:{port}"])

    def up():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        d.wait_ready(up)
        factory = lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=60)  # noqa: E731
        lifecycle_and_isolation(factory)
        garbage_keeps_serving(factory, lambda: socket.create_connection(("127.0.0.1", port)))
    finally:
        rc = d.stop()
    assert rc == 0, d.text()
    assert not up()


def test_usage_and_config_errors_exit_2(tmp):
    exe = str(sandboxd_path())
    r = run([exe, "--help"])
    assert r.returncode == 0 and "--config FILE" in r.stdout
    assert run([exe]).returncode == 2
    assert run([exe, "--config", "/nonexistent.json"]).returncode == 2
    bad = pathlib.Path(tmp, "bad.json")
    bad.write_text(json.dumps({"tenants": {"alice": {"token": ALICE, "role": "admin"}}}))
    r = run([exe, "--config", str(bad), "--socket", os.path.join(tmp, "s.sock")])
    assert r.returncode == 2 and "role" in r.stderr
    assert ALICE not in r.stderr
    cfg = str(write_config(tmp))
    r = run([exe, "--config", cfg, "--listen", "0.0.0.0:8080"])
    assert r.returncode == 2 and "loopback" in r.stderr
    r = run([exe, "--config", cfg, "--listen", "localhost:8080"])
    assert r.returncode == 2
    r = run([exe, "--config", cfg, "--socket", "relative.sock"])
    assert r.returncode == 2


def test_busy_socket_exits_3_and_leaves_the_first_daemon_alone(unix_daemon, tmp):
    r = run([str(sandboxd_path()), "--config", str(write_config(tmp)), "--socket", unix_daemon.sock], timeout=60)
    assert r.returncode == 3, r.stderr
    assert "busy" in r.stderr
    factory = lambda: UnixHTTPConnection(unix_daemon.sock)  # noqa: E731
    assert call(factory, "GET", "/v1/info")[0] == 200
    # A regular file where the socket should go is never replaced.
    precious = os.path.join(tmp, "precious")
    pathlib.Path(precious).write_text("keep me")
    r = run([str(sandboxd_path()), "--config", str(write_config(tmp)), "--socket", precious], timeout=60)
    assert r.returncode == 3 and pathlib.Path(precious).read_text() == "keep me"


def test_drain_timeout_exits_1_and_the_next_start_reaps(tmp, root_only):
    """A command outlives drain_timeout_s: the daemon exits 1 without waiting; what its sandbox
    held is swept by the reaper of the next daemon's start (NFR-5)."""
    sock = os.path.join(tmp, "d.sock")
    cfg = str(write_config(tmp, drain_timeout_s=0.3))
    first = Daemon(tmp, ["--config", cfg, "--socket", sock])
    first.wait_ready(lambda: os.path.exists(sock))
    factory = lambda: UnixHTTPConnection(sock, timeout=120)  # noqa: E731
    status, _, body = call(factory, "POST", "/v1/sandboxes", {})
    assert status == 201
    sid = body["sandbox"]
    hung = threading.Thread(target=lambda: call_quietly(factory, sid), daemon=True)
    hung.start()
    pid = first.proc.pid
    # The request is being served: its command runs in the sandbox.
    deadline = time.time() + 60
    while not descendants_running(pid, "sleep 30") and time.time() < deadline:
        time.sleep(0.05)
    assert descendants_running(pid, "sleep 30"), "the exec never started"
    inits = children_of(pid)
    assert inits and cgroups_of(pid)
    t0 = time.time()
    rc = first.stop()
    assert rc == 1, first.text()
    assert time.time() - t0 < 20  # gave up at its 0.3 s drain timeout, not after the 30 s command
    assert "requests still running" in first.text()
    assert not os.path.exists(sock)
    second = Daemon(tmp, ["--config", cfg, "--socket", sock])
    try:
        second.wait_ready(lambda: os.path.exists(sock))
        wait_gone(pid, inits)
        assert cgroups_of(pid) == []
        assert [p for p in inits if os.path.exists(f"/proc/{p}")] == []
    finally:
        assert second.stop() == 0, second.text()


def call_quietly(factory, sid):
    try:
        call(factory, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "sleep 30", "timeout_s": 60})
    except (OSError, http.client.HTTPException):
        pass  # the daemon went away under it: expected


def test_not_root_exits_3(root_only):
    with tempfile.TemporaryDirectory(prefix="sandboxd-e2e-") as d:
        os.chmod(d, 0o755)
        cfg = pathlib.Path(d, "c.json")
        cfg.write_text(json.dumps({"tenants": {"alice": {"token": ALICE}}}))
        cfg.chmod(0o644)
        r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(sandboxd_path()),
                 "--config", str(cfg), "--socket", os.path.join(d, "s.sock")])
        assert r.returncode == 3, r.stderr
        assert "needs root" in r.stderr
        assert not os.path.exists(os.path.join(d, "s.sock"))
