"""conformance/ reaches the reference runtime only through its public API (architecture brief):
no file of the harness includes anything of reference/ but its public headers (reference/include/sbx/).
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PUBLIC = {f"sbx/{p.name}" for p in (ROOT / "reference" / "include" / "sbx").glob("*.h")}


def test_harness_includes_only_the_public_api():
    src = ROOT / "conformance" / "src"
    local = {p.name for p in src.iterdir()}
    offenders = []
    for f in sorted(list(src.glob("*.cc")) + list(src.glob("*.h")) + list((ROOT / "conformance" / "tests").glob("*.*"))):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m and m.group(1) not in local | PUBLIC | {"sim.h"}:
                offenders.append(f"{f.relative_to(ROOT)}:{n}: {m.group(1)}")
    assert offenders == []
