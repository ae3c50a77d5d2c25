"""Where a checkout may live (issue 38, docs/testing.md "Where a checkout may live"): anywhere, but
on a writable mount that allows exec. A checkout on a read-only or noexec mount stops at once with
the reason and exit 3 (ci/lib.sh, sbx_check_location), not half-way through the build."""
import os
import pathlib
import shutil
import tempfile

from conftest import ROOT, run

CHECK = 'source ci/lib.sh && sbx_check_location && echo location-ok'


# The checkout's own build directory: ci/test runs pytest with SBX_BUILD set (to its build), and a
# check of that would find it writable and executable whatever the checkout under test is on.
ENV = {k: v for k, v in os.environ.items() if k != "SBX_BUILD"}


def _in_private_mount(setup, checkout):
    # A mount namespace of its own: the noexec or read-only mount never reaches the host's.
    return run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                f"{setup} && cd '{checkout}' && {CHECK}"], timeout=60, env=ENV)


def _checkout_copy(dest):
    (dest / "ci").mkdir(parents=True)
    for f in ("lib.sh", "jail"):
        shutil.copy2(ROOT / "ci" / f, dest / "ci" / f)


def test_a_checkout_on_a_noexec_mount_is_refused_clearly(root_only):
    base = pathlib.Path(tempfile.mkdtemp(prefix="sbx-loc ", dir="/var/tmp"))
    try:
        mnt = base / "mnt"
        mnt.mkdir()
        _checkout_copy(base / "src")
        r = _in_private_mount(f"mount -t tmpfs -o noexec tmpfs '{mnt}' && cp -a '{base}/src' '{mnt}/p'",
                              mnt / "p")
        assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
        assert "cannot run programs from the build directory" in r.stderr and "noexec" in r.stderr, r.stderr
        assert "location-ok" not in r.stdout
    finally:
        shutil.rmtree(base)


def test_a_checkout_on_a_read_only_mount_is_refused_clearly(root_only):
    base = pathlib.Path(tempfile.mkdtemp(prefix="sbx-loc-", dir="/var/tmp"))
    try:
        _checkout_copy(base / "p")
        r = _in_private_mount(f"mount --bind '{base}/p' '{base}/p' && mount -o remount,bind,ro '{base}/p'",
                              base / "p")
        assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
        assert "cannot write the build directory" in r.stderr, r.stderr
        assert not (base / "p/build").exists()
    finally:
        shutil.rmtree(base)


def test_a_checkout_under_tmp_with_a_space_passes_the_check(root_only):
    base = pathlib.Path(tempfile.mkdtemp(prefix="sbx loc ", dir="/tmp"))
    try:
        _checkout_copy(base / "p")
        r = run(["bash", "-c", CHECK], timeout=60, cwd=str(base / "p"), env=ENV)
        assert r.returncode == 0 and "location-ok" in r.stdout, (r.stdout, r.stderr)
    finally:
        shutil.rmtree(base)
