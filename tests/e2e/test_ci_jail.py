"""ci/jail (docs/testing.md, "Several runs at once"): a command in namespaces of its own sees only
its own processes, cgroups, interfaces and /run, and the jail leaves nothing behind on the host;
cgroups the command leaves are named and fail the jail (exit 3)."""
import os
import pathlib
import re
import shutil
import tempfile

import pytest

from conftest import ROOT, run

JAIL = ROOT / "ci/jail"


@pytest.fixture(autouse=True)
def not_in_a_jail(request):
    if os.environ.get("SBX_JAIL") and request.node.name != "test_a_jail_does_not_nest":
        pytest.skip(f"LOUD SKIP: this run is inside jail {os.environ['SBX_JAIL']} and jails do "
                    "not nest; these tests run on the host (CI)")


def host_jail_cgroups(name):
    found = []
    for hierarchy in pathlib.Path("/sys/fs/cgroup").iterdir():
        if hierarchy.is_dir() and not hierarchy.is_symlink():
            found += [str(p) for p in hierarchy.rglob(f"sbx-{name}")]
    return found


def test_a_jail_sees_only_its_own_objects(root_only, tmp_path):
    script = (
        "echo pid1=$(tr '\\0' ' ' </proc/1/cmdline);"
        "echo procs=$(ls /proc | grep -c '^[0-9]*$');"
        "echo cgroup=$(grep '^[0-9]*:pids:' /proc/self/cgroup | cut -d: -f3);"
        "echo pidsdirs=$(find /sys/fs/cgroup/pids -mindepth 1 -type d | wc -l);"
        "echo links=$(ls /sys/class/net 2>/dev/null | wc -l)/$(ip -o link | wc -l);"
        "echo lo=$(ip -o link show lo | grep -c 'UP');"
        "echo run=$(ls -A /run | tr '\\n' ' ');"
        "echo host=$(hostname)")
    r = run([str(JAIL), "--name", "t-jail-1", "--", "sh", "-c", script], timeout=60)
    assert r.returncode == 0, r.stderr
    out = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    assert "ci/jail --inside t-jail-1" in out["pid1"], out  # PID 1 is the jail's own
    assert int(out["procs"]) <= 5, out           # the jail, the shell, its pipeline: not the host's
    assert out["cgroup"] == "/", out             # the cgroup namespace's root is the jail's cgroup
    assert int(out["pidsdirs"]) == 0, out        # and the host's other cgroups are out of sight
    assert out["links"].endswith("/1"), out      # loopback only
    assert out["lo"] == "1", out
    assert set(out["run"].split()) <= {"lock", "mount"}, out  # a fresh /run (mount: libmount's)
    assert out["host"] == "t-jail-1"
    assert host_jail_cgroups("t-jail-1") == []   # nothing left on the host


def test_status_passes_through_and_processes_end_with_the_jail(root_only, tmp_path):
    # A process the command started in the background dies with the jail's pid namespace.
    marker = tmp_path / "alive"
    r = run([str(JAIL), "--name", "t-jail-2", "--", "sh", "-c",
             f"(sleep 300; touch {marker}) & exit 7"], timeout=60)
    assert r.returncode == 7, r.stderr
    left = [p for p in pathlib.Path("/proc").iterdir()
            if p.name.isdigit() and _cmdline(p) == "sleep\0300\0"]
    assert left == []
    assert host_jail_cgroups("t-jail-2") == []


def test_a_cgroup_the_command_leaves_is_named_and_fails_the_jail(root_only):
    r = run([str(JAIL), "--name", "t-jail-3", "--", "sh", "-c", "mkdir /sys/fs/cgroup/pids/forgotten"],
            timeout=60)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert re.search(r"left behind by the command: cgroup .*forgotten", r.stderr), r.stderr
    assert host_jail_cgroups("t-jail-3") == []


def test_bind_shows_a_copy_at_the_original_path(root_only):
    # /tmp is the jail's own: bind from a path outside it.
    base = pathlib.Path("/var/tmp") / f"sbx-jail-test-{os.getpid()}"
    try:
        (base / "a").mkdir(parents=True)
        (base / "b").mkdir()
        (base / "a/which").write_text("a")
        (base / "b/which").write_text("b")
        r = run([str(JAIL), "--name", "t-jail-4", "--bind", f"{base}/b={base}/a", "--",
                 "cat", f"{base}/a/which"], timeout=60, cwd=str(base / "a"))
        assert r.returncode == 0, r.stderr
        assert r.stdout == "b"
    finally:
        run(["rm", "-rf", str(base)])


def test_a_checkout_below_tmp_stays_visible_in_the_jail(root_only):
    # Issue 38: a clone made with `mktemp -d` (under /tmp, whose jail copy is a fresh tmpfs) runs
    # its jail from where it is. The jail keeps the clone's top directory below /tmp (the clone
    # and ../shared beside it) and nothing else of the host's /tmp.
    top = pathlib.Path(tempfile.mkdtemp(prefix="sbx-jail-checkout ", dir="/tmp"))  # a space too
    stranger = pathlib.Path(tempfile.mkdtemp(prefix="sbx-jail-stranger-", dir="/tmp"))
    try:
        checkout = top / "p"
        (checkout / "ci").mkdir(parents=True)
        shutil.copy2(JAIL, checkout / "ci/jail")
        (checkout / "in-checkout").write_text("checkout")
        (top / "shared").mkdir()
        (top / "shared/in-shared").write_text("shared")
        other = top / "p.copy"
        other.mkdir()
        (other / "in-checkout").write_text("copy")
        script = ("pwd; cat in-checkout; echo; cat ../shared/in-shared; echo;"
                  f"ls -A /tmp; test -e '{stranger}' && echo stranger-visible;"
                  "echo written > made-inside")
        r = run([str(checkout / "ci/jail"), "--name", "t-jail-6", "--", "sh", "-c", script],
                timeout=60, cwd=str(checkout))
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[:3] == [str(checkout), "checkout", "shared"], lines
        assert lines[3:] == [top.name], lines   # the kept top only: no other host /tmp entry
        assert (checkout / "made-inside").read_text() == "written\n"  # the same directory
        # A --bind with both ends below /tmp (ci/soak's copy shown at the tree's own path).
        r = run([str(checkout / "ci/jail"), "--name", "t-jail-6", "--bind", f"{other}={checkout}",
                 "--", "cat", "in-checkout"], timeout=60, cwd=str(checkout))
        assert r.returncode == 0 and r.stdout == "copy", (r.stdout, r.stderr)
        assert host_jail_cgroups("t-jail-6") == []
    finally:
        shutil.rmtree(top)
        shutil.rmtree(stranger)


def test_a_working_directory_the_jail_replaces_whole_is_refused_clearly(root_only):
    # /tmp itself cannot be kept without showing the host's whole /tmp: refused before anything
    # is set up, with the reason (not as a failed cd inside).
    for top in ("/tmp", "/dev/shm"):
        r = run([str(JAIL), "--name", "t-jail-7", "--", "true"], timeout=60, cwd=top)
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert f"{top} is itself one of /tmp /run /dev/shm" in r.stderr, r.stderr
    assert host_jail_cgroups("t-jail-7") == []


def test_a_jail_does_not_nest(root_only):
    env = dict(os.environ, SBX_JAIL="outer")
    r = run([str(JAIL), "--", "true"], env=env)
    assert r.returncode == 4 and "already inside jail outer" in r.stderr, r.stderr
    if not os.environ.get("SBX_JAIL"):
        r = run([str(JAIL), "--name", "t-jail-5", "--", "sh", "-c", "echo $SBX_JAIL"], timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "t-jail-5", r


def test_bad_usage_is_exit_2():
    assert run([str(JAIL)]).returncode == 2
    assert run([str(JAIL), "--name", "bad/name", "--", "true"]).returncode == 2
    assert run([str(JAIL), "--bind", "relative=/x", "--", "true"]).returncode == 2
    r = run([str(JAIL), "--help"])
    assert r.returncode == 0 and "usage: ci/jail" in r.stdout


def _cmdline(p):
    try:
        return (p / "cmdline").read_text()
    except OSError:
        return ""
