"""The fixtures sandcheck starts (the mirror on loopback) and its terminal behaviour."""
import os
import pathlib
import pty
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent / "data"))
from sandcheck_support import BUILD, FAST, ROOT, SANDCHECK, SIM, Mirror, sandcheck  # noqa: E402

MIRROR_BIN = BUILD / "bin" / "sbx-mirror"


def mirror_processes(root):
    """PIDs of sbx-mirror processes serving `root`."""
    pids = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"sbx-mirror") and str(root).encode() in cmd:
            pids.append(int(d.name))
    return pids


@pytest.fixture
def content(tmp_path):
    if not MIRROR_BIN.exists():
        pytest.fail(f"build first: {MIRROR_BIN} (target sbx-mirror)")
    root = tmp_path / "content"
    shutil.copytree(ROOT / "fixtures" / "mirror" / "content", root)
    return root


def test_local_mirror_is_started_used_and_stopped(tmp_path, content):
    state = tmp_path / "state"
    state.mkdir()
    r = sandcheck(["run", "--target", f"adapter:{SIM}", "--mirror-root", str(content)] + FAST,
                  out_dir=tmp_path / "out", env={"SIM_STATE_DIR": str(state)})
    assert r.code == 0, r
    mirror = r.report["environment"]["fixtures"]["mirror"]
    assert mirror["mode"] == "local" and mirror["address"].startswith("127.0.0.1:")
    hosts = r.report["scenarios"][0]["sandbox"]["request"]["hosts"]
    # The cluster API's name is in the directory too, with no rule (SCN-4: it must not resolve).
    assert hosts == {"pkg-mirror.demo-tools.svc.cluster.local": mirror["address"],
                     "kubernetes.default.svc.cluster.local": mirror["address"]}
    # The download really reached the mirror, by the allowed name.
    assert "GET /hello-1.0.txt host=pkg-mirror.demo-tools.svc.cluster.local" in mirror["log"]
    assert mirror_processes(content) == []


def test_mirror_dies_with_a_killed_sandcheck(tmp_path, content):
    # A hanging adapter keeps sandcheck busy; SIGKILL it: the mirror must not outlive it.
    state = tmp_path / "state"
    state.mkdir()
    env = dict(os.environ, SIM_STATE_DIR=str(state), SIM_FAULTS="hang@create")
    p = subprocess.Popen([str(SANDCHECK), "run", "--target", f"adapter:{SIM}", "--mirror-root", str(content),
                          "--out", str(tmp_path / "out")] + FAST, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not mirror_processes(content) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mirror_processes(content), "the mirror never started"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    deadline = time.monotonic() + 30  # at once when it dies; a survivor waits it out
    while mirror_processes(content) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mirror_processes(content) == []
    # (The hung adapter was in its own process group; clean it up here.)
    for d in pathlib.Path("/proc").iterdir():
        try:
            if d.name.isdigit() and str(state).encode() in (d / "environ").read_bytes():
                os.kill(int(d.name), signal.SIGKILL)
        except OSError:
            pass


def adapter_in(state, op):
    """True if the sim adapter of the run whose state is `state` is running `op`."""
    for d in pathlib.Path("/proc").iterdir():
        try:
            if (d.name.isdigit() and str(state).encode() in (d / "environ").read_bytes()
                    and (d / "cmdline").read_bytes().split(b"\0")[1:2] == [op.encode()]):
                return True
        except OSError:
            pass
    return False


def test_interrupt_kills_the_adapter_and_writes_the_report(tmp_path):
    mirror = Mirror(tmp_path / "m")
    state = tmp_path / "state"
    state.mkdir()
    env = dict(os.environ, SIM_STATE_DIR=str(state), SIM_FAULTS="hang@exec")
    try:
        p = subprocess.Popen([str(SANDCHECK), "run", "--target", f"adapter:{SIM}", "--mirror", mirror.address,
                              "--out", str(tmp_path / "out")] + FAST, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        # Interrupt it while the adapter hangs in exec (a sandbox exists), not before.
        deadline = time.monotonic() + 60
        while not adapter_in(state, "exec") and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert adapter_in(state, "exec"), "the run never reached exec"
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=15)
    finally:
        mirror.close()
    assert p.returncode == 3, out
    assert "interrupted" in out
    assert (tmp_path / "out" / "report.json").exists()
    assert list(state.iterdir()) == []  # the sandbox was still destroyed


def test_progress_line_on_a_terminal(tmp_path):
    mirror = Mirror(tmp_path / "m")
    state = tmp_path / "state"
    state.mkdir()
    master, slave = pty.openpty()
    try:
        p = subprocess.run([str(SANDCHECK), "run", "--target", f"adapter:{SIM}", "--mirror", mirror.address,
                            "--out", str(tmp_path / "out")] + FAST,
                           env=dict(os.environ, SIM_STATE_DIR=str(state)), stdout=subprocess.PIPE, stderr=slave,
                           timeout=60)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        mirror.close()
    assert p.returncode == 0
    err = b"".join(chunks).decode()
    assert "\r\x1b[K[1/6] allowed download: task" in err
    assert "[6/6] memory hog on a 256 MiB limit" in err
    assert err.endswith("\r\x1b[K")  # the line is cleared before the summary
    assert b"\x1b[K" not in p.stdout  # stdout stays a clean log


def probe(*prefix):
    r = subprocess.run([*prefix, str(BUILD / "tools" / "sbx-probe")], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r
    import json
    return json.loads(r.stdout.splitlines()[0])


def test_probe_counts_kernel_threads_apart():
    """A VM guest's /proc lists its kernel's threads (kthreadd, ksoftirqd, ...): the probe
    counts them apart from processes, so isolation/pid-namespace's "a handful of processes"
    does not fail a correct VM-class runtime (docs/sandcheck.md, "VM-class runtimes"). Here the
    host's PID namespace stands in for a guest's: it shows kernel threads; a PID namespace of
    its own shows none, and the probe alone."""
    host = probe()
    assert host["kernel_threads_visible"] > 0, host
    listed = sum(1 for d in pathlib.Path("/proc").iterdir() if d.name.isdigit())
    # Processes come and go between the two counts: the sum is about what /proc listed.
    assert abs(host["procs_visible"] + host["kernel_threads_visible"] - listed) < 20, (host, listed)
    assert host["procs_visible"] < listed
    own = probe("unshare", "--pid", "--fork", "--mount-proc")
    assert own["kernel_threads_visible"] == 0, own
    assert own["procs_visible"] == 1, own
