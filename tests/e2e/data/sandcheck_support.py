"""Helpers for the sandcheck end-to-end tests (tests/e2e/test_sandcheck_*.py).

Test doubles only: a mirror on loopback, and a fake Execution API that forwards to the
simulated adapter (conformance/tests/sim_adapter.cc), so that the http driver is exercised
end to end without a real sandboxd.
"""
import http.server
import json
import os
import pathlib
import socket
import socketserver
import subprocess
import threading

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("SBX_BUILD", ROOT / "build"))
SANDCHECK = BUILD / "bin" / "sandcheck"
SIM = BUILD / "tests" / "sandcheck-sim-adapter"
REPORT_SCHEMA = ROOT / "docs" / "report.schema.json"
SCENARIO_SCHEMA = ROOT / "scenarios" / "schema" / "scenario.schema.json"
JUNIT_XSD = ROOT / "tests" / "e2e" / "data" / "junit.xsd"

# Short CPU work keeps each run near a second: 180 M iterations = 0.3 s emulated by the sim, so
# per-call overhead on a loaded machine (tens of ms) cannot move the 1.6x..3x band of cpu-cap.
FAST = ["--var", "cpu_work=180"]


class Result:
    def __init__(self, proc, out_dir):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.out_dir = out_dir
        path = out_dir / "report.json" if out_dir else None
        self.report = json.loads(path.read_text()) if path and path.exists() else None

    def outcomes(self):
        return {c["id"].split("/", 1)[1]: c["outcome"] for c in self.report["checks"]}

    def failing(self):
        return {k for k, v in self.outcomes().items() if v != "pass"}

    def __repr__(self):
        # The checks that did not pass come first, with their reason and evidence: pytest cuts a
        # long message in the middle, and the console table alone does not say why (a CI run
        # once showed only "exit 1" and the first rows).
        head = ""
        if self.report:
            for c in self.report.get("checks", []):
                if c.get("outcome") != "pass":
                    ev = json.dumps(c.get("evidence", {}), sort_keys=True)[:600]
                    head += f"{c['id']}: {c['outcome']}: {c.get('reason', '')}\n  evidence: {ev}\n"
        return f"exit {self.code}\n{head}stdout:\n{self.out}\nstderr:\n{self.err}"


def sandcheck(args, out_dir=None, env=None, timeout=60, cwd=None):
    """Runs sandcheck; with out_dir, adds --out and loads the report."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    cmd = [str(SANDCHECK)] + list(args)
    if out_dir is not None:
        cmd += ["--out", str(out_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
    return Result(proc, out_dir)


def sim_run(tmp_path, mirror, faults="", extra=(), env=None, name="run", timeout=60):
    """sandcheck run against the simulated adapter with the given fault switches."""
    state = tmp_path / f"{name}-state"
    state.mkdir(exist_ok=True)
    e = {"SIM_STATE_DIR": str(state), "SIM_FAULTS": faults}
    e.update(env or {})
    args = ["run", "--target", f"adapter:{SIM}", "--mirror", mirror.address] + FAST + list(extra)
    return sandcheck(args, out_dir=tmp_path / name, env=e, timeout=timeout)


class Mirror:
    """The mirror fixture's stand-in: serves hello-1.0.txt on 127.0.0.1."""

    def __init__(self, root):
        root.mkdir(parents=True, exist_ok=True)
        (root / "hello-1.0.txt").write_text("hello package 1.0\n")
        handler = lambda *a, **kw: _QuietFiles(*a, directory=str(root), **kw)  # noqa: E731
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def validate_report(report):
    import jsonschema

    schema = json.loads(REPORT_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(report), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])


def xmllint(xml_path):
    proc = subprocess.run(["xmllint", "--noout", "--schema", str(JUNIT_XSD), str(xml_path)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def processes_with_env(marker):
    """PIDs whose environment mentions `marker` (to prove an adapter's group was killed)."""
    pids = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if marker.encode() in (d / "environ").read_bytes():
                pids.append(int(d.name))
        except OSError:
            pass
    return pids


class FakeExecutionApi:
    """A test double of sandboxd's Execution API that forwards every call to the sim adapter.

    Listens on TCP 127.0.0.1 or on a unix socket; answers 401 to a missing or wrong token.
    """

    def __init__(self, state_dir, token, unix_path=None, faults=""):
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def address_string(self):
                return "local"

            def _answer(self, status, obj):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                api.requests.append((method, self.path, dict(self.headers), body))
                if self.headers.get("Authorization") != f"Bearer {token}":
                    return self._answer(401, {"error": "unauthenticated"})
                parts = self.path.strip("/").split("/")
                if method == "GET" and parts == ["v1", "info"]:
                    return self._answer(200, api.adapter("info", {}))
                if method == "POST" and parts == ["v1", "sandboxes"]:
                    return self._answer(201, api.adapter("create", body))
                if len(parts) >= 3 and parts[:2] == ["v1", "sandboxes"]:
                    sid = parts[2]
                    if method == "DELETE" and len(parts) == 3:
                        return self._answer(200, api.adapter("destroy", {"sandbox": sid}))
                    if method == "POST" and parts[3:] == ["exec"]:
                        assert body.get("sandbox") == sid
                        answer = api.adapter("exec", body)
                        # Like an API that answers a crashed sandbox with 503 and a body.
                        return self._answer(503 if answer["state"] == "CRASHED" else 200, answer)
                    if method == "POST" and parts[3:] == ["revert"]:
                        return self._answer(200, api.adapter("revert", {"sandbox": sid}))
                    if method == "GET" and parts[3:] == ["gateway-log"]:
                        return self._answer(200, api.adapter("gateway_log", {"sandbox": sid}))
                return self._answer(404, {"error": "not_found"})

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_DELETE(self):
                self._handle("DELETE")

        self.state_dir = state_dir
        self.faults = faults
        self.requests = []
        if unix_path:
            class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
                daemon_threads = True

                def get_request(self):
                    conn, _ = super().get_request()
                    return conn, ("local", 0)

            self.server = UnixServer(str(unix_path), Handler)
            self.spec = f"unix:{unix_path}"
        else:
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.spec = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def adapter(self, op, obj):
        env = dict(os.environ, SIM_STATE_DIR=str(self.state_dir), SIM_FAULTS=self.faults)
        proc = subprocess.run([str(SIM), op], input=json.dumps(obj), capture_output=True, text=True,
                              env=env, timeout=30)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
