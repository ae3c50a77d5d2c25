"""sandboxd over TLS (issue 14, "TLS"): certificates made here with the openssl CLI (a CA, a
server certificate for IP 127.0.0.1 signed by it, a client certificate, a self-signed "other"),
the built daemon with a "tls" config object on 127.0.0.1, and Python's ssl as the client: the
API answers over TLS with the token, a plain-HTTP client and an untrusting client get nothing,
mutual TLS refuses a client without a certificate, sandboxctl --server https:// works with
--ca or --pin and never without trust, config mistakes are exit 2, and a front
sandboxd whose remote worker is https://127.0.0.1:PORT (trusted by ca_file) places a sandbox on
that worker and runs a command in it."""
import http.client
import json
import os
import pathlib
import socket
import ssl
import subprocess

import pytest

from conftest import BIN, run
from test_sandboxd import ALICE, Daemon, UnixHTTPConnection, call, free_port, sandboxd_path, write_config

FRONT = "alice-front-tls-token-0123456789"
WORKER = "alice-on-tls-worker-0123456789"


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls-certs")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    (d / "server.ext").write_text("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n"
                                  "extendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    openssl("req", "-x509", *ec, "-keyout", d / "ca.key", "-out", d / "ca.pem", "-days", "2",
            "-subj", "/CN=sbx-e2e-ca")
    for name in ("server", "client"):
        openssl("req", *ec, "-keyout", d / f"{name}.key", "-out", d / f"{name}.csr", "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", d / f"{name}.csr", "-CA", d / "ca.pem", "-CAkey", d / "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", d / f"{name}.ext", "-out", d / f"{name}.pem")
    openssl("req", "-x509", *ec, "-keyout", d / "other.key", "-out", d / "other.pem", "-days", "2",
            "-subj", "/CN=other", "-addext", "subjectAltName=IP:127.0.0.1")
    for k in d.glob("*.key"):
        k.chmod(0o600)
    return d


def tls_context(certs, ca="ca.pem", client=None):
    ctx = ssl.create_default_context(cafile=str(certs / ca))
    if client:
        ctx.load_cert_chain(str(certs / f"{client}.pem"), str(certs / f"{client}.key"))
    return ctx


def https(port, ctx, timeout=60):
    return lambda: http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)


def tls_daemon(directory, certs, port, token=ALICE, mutual=False, **extra):
    tls = {"cert_file": str(certs / "server.pem"), "key_file": str(certs / "server.key")}
    if mutual:
        tls["client_ca_file"] = str(certs / "ca.pem")
    cfg = write_config(directory, tls=tls, **extra)
    if token != ALICE:  # a worker: its own tenant token
        c = json.loads(cfg.read_text())
        c["tenants"] = {"alice": {"token": token}}
        cfg.write_text(json.dumps(c))
    return Daemon(directory, ["--config", str(cfg), "--listen", f"127.0.0.1:{port}"])


def answers(port, ctx, token=ALICE):
    try:
        return call(https(port, ctx, timeout=5), "GET", "/v1/info", token=token)[0] == 200
    except (OSError, ssl.SSLError):
        return False


def test_the_api_over_tls_and_what_is_refused(tmp_path, certs, root_only):
    port = free_port()
    d = tls_daemon(tmp_path, certs, port)
    ctx = tls_context(certs)
    try:
        d.wait_ready(lambda: answers(port, ctx))
        status, _, info = call(https(port, ctx), "GET", "/v1/info")
        assert status == 200 and info["tenant"] == "alice" and info["api"] == "v1", info
        status, _, body = call(https(port, ctx), "GET", "/v1/info", token="wrong-token-0123456789")
        assert status == 401, body
        # Plain HTTP to the TLS port: no answer, a closed connection.
        with pytest.raises((http.client.HTTPException, OSError)):
            call(lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=10), "GET", "/v1/info")
        # A client that trusts another CA refuses the server.
        with pytest.raises(ssl.SSLCertVerificationError):
            call(https(port, tls_context(certs, ca="other.pem")), "GET", "/v1/info")
        # Garbage and silence do not hurt it.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"\x16\x03\x01\xff\xff" + os.urandom(2000))
            try:
                while s.recv(4096):
                    pass
            except ConnectionResetError:
                pass
        assert answers(port, ctx)
        # sandboxctl --server https://... with --ca or --pin; never without trust.
        ctl = [str(BIN / "sandboxctl"), "--server", f"https://127.0.0.1:{port}", "--token", ALICE]
        pin = subprocess.run(["openssl", "x509", "-in", str(certs / "server.pem"), "-noout", "-fingerprint",
                              "-sha256"], capture_output=True, text=True, check=True).stdout.split("=", 1)[1].strip()
        r = run([*ctl, "--ca", str(certs / "ca.pem"), "info"])
        assert r.returncode == 0 and "backends" in r.stdout, r.stderr
        r = run([*ctl, "--pin", pin, "list"])
        assert r.returncode == 0, r.stderr
        r = run([*ctl, "info"])
        assert r.returncode == 2 and "unverified TLS is refused" in r.stderr, r.stderr
        r = run([*ctl, "--pin", "ab" * 32, "info"])
        assert r.returncode == 3 and "does not match the pinned fingerprint" in r.stderr, r.stderr
        r = run([*ctl, "--ca", str(certs / "other.pem"), "info"])
        assert r.returncode == 3 and "not trusted" in r.stderr, r.stderr
    finally:
        rc = d.stop()
    assert rc == 0, d.text()
    assert "(TLS)" in d.text()
    assert ALICE not in d.text()


def test_mutual_tls_requires_a_client_certificate(tmp_path, certs, root_only):
    port = free_port()
    d = tls_daemon(tmp_path, certs, port, mutual=True)
    with_cert = tls_context(certs, client="client")
    try:
        d.wait_ready(lambda: answers(port, with_cert))
        for ctx in (tls_context(certs), tls_context(certs, client="other")):
            with pytest.raises((ssl.SSLError, OSError, http.client.HTTPException)):
                call(https(port, ctx, timeout=10), "GET", "/v1/info")
        assert answers(port, with_cert)
    finally:
        rc = d.stop()
    assert rc == 0, d.text()


def test_tls_config_errors_exit_2(tmp_path, certs):
    exe = str(sandboxd_path())
    world = tmp_path / "world.key"
    world.write_bytes((certs / "server.key").read_bytes())
    world.chmod(0o644)
    for tls, needle in [
        ({"cert_file": str(certs / "server.pem"), "key_file": str(world)}, "readable by others"),
        ({"cert_file": str(certs / "server.pem")}, "key_file"),
        ({"cert_file": str(certs / "server.pem"), "key_file": str(certs / "other.key")}, "is not the key"),
        ({"cert_file": str(certs / "server.pem"), "key_file": str(certs / "server.key"), "x": 1}, "'x'"),
    ]:
        cfg = write_config(tmp_path, tls=tls)
        r = run([exe, "--config", str(cfg), "--listen", "127.0.0.1:1"])
        assert r.returncode == 2, (tls, r.stderr)
        assert needle in r.stderr, (tls, r.stderr)
    # TLS does not lift the loopback rule: a public address still needs --allow-remote.
    cfg = write_config(tmp_path, tls={"cert_file": str(certs / "server.pem"), "key_file": str(certs / "server.key")})
    r = run([exe, "--config", str(cfg), "--listen", "0.0.0.0:8443"])
    assert r.returncode == 2 and "loopback" in r.stderr and "in clear" not in r.stderr, r.stderr


def test_a_front_places_a_sandbox_on_a_tls_worker(tmp_path, certs, root_only):
    wdir, fdir = tmp_path / "worker", tmp_path / "front"
    wdir.mkdir()
    fdir.mkdir()
    port = free_port()
    worker = tls_daemon(wdir, certs, port, token=WORKER)
    front = None
    try:
        worker.wait_ready(lambda: answers(port, tls_context(certs), token=WORKER))
        sock = str(fdir / "sandboxd.sock")
        cfg = {"tenants": {"alice": {"token": FRONT}},
               "remote_workers": [{"name": "tw", "url": f"https://127.0.0.1:{port}",
                                   "ca_file": str(certs / "ca.pem"), "tokens": {"alice": WORKER}}],
               "remote_call_timeout_s": 30}
        path = fdir / "c.json"
        path.write_text(json.dumps(cfg))
        path.chmod(0o600)
        front = Daemon(fdir, ["--config", str(path), "--socket", sock])
        factory = lambda: UnixHTTPConnection(sock, timeout=120)  # noqa: E731

        def front_up():
            if not os.path.exists(sock):
                return False
            try:
                return call(factory, "GET", "/v1/info", token=FRONT)[0] == 200
            except OSError:
                return False

        front.wait_ready(front_up)
        status, _, info = call(factory, "GET", "/v1/info", token=FRONT)
        assert "remote" in info["backends"], info
        status, _, body = call(factory, "POST", "/v1/sandboxes", {"backend": "remote", "trust": "verified"},
                               token=FRONT)
        assert status == 201, body
        sid = body["sandbox"]
        status, _, r = call(factory, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo hi"}, token=FRONT)
        assert status == 200 and r["status"] == "ok" and r["stdout"] == "hi\n", r
        assert r["backend"] == "remote", r
        # It really lives on the TLS worker.
        status, _, listed = call(https(port, tls_context(certs)), "GET", "/v1/sandboxes", token=WORKER)
        assert status == 200 and len(listed["sandboxes"]) == 1, listed
        status, _, body = call(factory, "DELETE", f"/v1/sandboxes/{sid}", token=FRONT)
        assert status == 200, body
    finally:
        if front is not None:
            assert front.stop() == 0, front.text()
        assert worker.stop() == 0, worker.text()
