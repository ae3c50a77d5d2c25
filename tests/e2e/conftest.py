"""Shared fixtures of the end-to-end tests: they run the built binaries as a user would."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("SBX_BUILD", ROOT / "build"))
BIN = BUILD / "bin"


def run(args, timeout=120, **kw):
    """Runs a command, returning CompletedProcess with text output."""
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="session")
def bin_dir():
    if not (BIN / "sandboxctl").exists():
        pytest.fail(f"build first: {BIN}/sandboxctl missing")
    return BIN


@pytest.fixture(scope="session")
def root_only():
    if os.geteuid() != 0:
        pytest.skip("LOUD SKIP: needs root (namespaces, cgroups)")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """The mirror's stand-in on loopback (hello-1.0.txt), for runs against the simulated adapter."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent / "data"))
    from sandcheck_support import SANDCHECK, SIM, Mirror
    if not SANDCHECK.exists() or not SIM.exists():
        pytest.fail(f"build first: {SANDCHECK} and {SIM} (targets sandcheck, sandcheck-sim-adapter)")
    m = Mirror(tmp_path_factory.mktemp("mirror"))
    yield m
    m.close()
