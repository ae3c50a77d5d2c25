#!/usr/bin/env python3
"""One command from the command line, side by side (issue 16, docs/performance.md).

Runs each command of the table once per round, in a rotating order (so a burst of load falls on
all of them alike), for --rounds rounds, and prints p50/p95 and the ratio to bubblewrap's p50
(and, for gvisor, to `runsc do`'s): the cost a user pays for the first command they type.

  /usr/bin/python3 bench/oneshot-cli.py [--build build] [--rounds 30] [--gvisor]

The floor is a bare fork+exec of /bin/true (subprocess from this script). Needs root (bwrap and
runsc run as root here, as sandboxctl does). Exit 0 unless a command failed.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the build directory (default: build)")
    ap.add_argument("--rounds", type=int, default=30, help="rounds (default 30)")
    ap.add_argument("--gvisor", action="store_true", help="also sandboxctl --backend gvisor and runsc do")
    a = ap.parse_args()
    ctl = os.path.join(a.build, "bin", "sandboxctl")
    if not os.access(ctl, os.X_OK):
        sys.exit(f"oneshot-cli: no sandboxctl at {ctl} (build first, or --build DIR)")
    cmds = [
        ("fork+exec /bin/true", ["/bin/true"]),
        ("bwrap --unshare-all /bin/true",
         ["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
          "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
          "--dev", "/dev", "/bin/true"]),
        ("sandboxctl run -- true", [ctl, "run", "--", "true"]),
        ("sandboxctl run --backend oci -- true", [ctl, "run", "--backend", "oci", "--", "true"]),
        ("sandboxctl info", [ctl, "info"]),
    ]
    runsc_root = None
    if a.gvisor:
        runsc_root = tempfile.mkdtemp(prefix="oneshot-runsc-")
        cmds += [
            ("runsc do /bin/true",
             ["runsc", "--root", runsc_root, "--platform=ptrace", "--network=none", "do", "/bin/true"]),
            ("sandboxctl run --backend gvisor -- true", [ctl, "run", "--backend", "gvisor", "--", "true"]),
        ]
    times = {name: [] for name, _ in cmds}
    try:
        for name, argv in cmds:  # warm-up: caches (probe answers, page cache)
            r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if r.returncode != 0:
                sys.exit(f"oneshot-cli: `{' '.join(argv)}` failed ({r.returncode}): {r.stderr.decode()[-300:]}")
        for i in range(a.rounds):
            k = i % len(cmds)
            for name, argv in cmds[k:] + cmds[:k]:
                t0 = time.perf_counter()
                r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                dt = time.perf_counter() - t0
                if r.returncode != 0:
                    sys.exit(f"oneshot-cli: `{' '.join(argv)}` failed ({r.returncode}) in round {i}")
                times[name].append(dt)
            print(f"\rround {i + 1}/{a.rounds}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    finally:
        if runsc_root:
            shutil.rmtree(runsc_root, ignore_errors=True)
    bw = statistics.median(times["bwrap --unshare-all /bin/true"])
    rd = statistics.median(times["runsc do /bin/true"]) if a.gvisor else None
    print("| command | runs | p50 | p95 | p50 / bwrap |" + (" p50 / runsc do |" if rd else ""))
    print("|---|---|---|---|---|" + ("---|" if rd else ""))
    for name, _ in cmds:
        v = times[name]
        p50 = statistics.median(v)
        row = f"| `{name}` | {len(v)} | {p50 * 1e3:.1f} ms | {pct(v, 95) * 1e3:.1f} ms | {p50 / bw:.2f}× |"
        if rd:
            row += f" {p50 / rd:.2f}× |" if "gvisor" in name or "runsc" in name else " |"
        print(row)


if __name__ == "__main__":
    main()
