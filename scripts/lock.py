"""Write constraints.txt: the exact versions that `scripts/setup.sh` installs and CI tests.

pip resolves the package with every extra as if nothing were installed (`--dry-run --ignore-installed
--report`), and the versions it picks are written out, one `name==version` a line. setup.sh installs
with `-c constraints.txt`, so a fresh machine gets what CI last passed with rather than whatever is
newest that day. torch is left out: it is pinned on its own (the CPU or CUDA build of one release, by
machine), and so are the NVIDIA packages a CUDA torch brings.

    python scripts/lock.py            # rewrite constraints.txt
    python scripts/lock.py --check    # exit 1 if pyproject's lower bounds and constraints.txt disagree
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
EXTRAS = "web,android,bedrock,gym,dev"
UNLOCKED = ("torch", "rlsys")  # torch: one pin, two builds; rlsys: this package
HEADER = "# Written by scripts/lock.py: what scripts/setup.sh installs and CI tests. Do not edit by hand.\n"


def resolve() -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        cmd += ["--report", str(report), f"{ROOT}[{EXTRAS}]"]
        subprocess.run(cmd, check=True)
        installs = json.loads(report.read_text())["install"]
    found = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    return {n: v for n, v in sorted(found.items()) if n not in UNLOCKED and not n.startswith("nvidia-")}


def read_constraints(path: Path = CONSTRAINTS) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def direct_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in EXTRAS.split(","):
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def bound_mismatches(pins: dict[str, str]) -> list[str]:
    """Direct requirements whose lower bound is not the version CI tests: a bound below it is a promise
    nobody checks, one above it cannot be installed from the constraints."""
    bad = []
    for req in direct_requirements():
        name = canonicalize_name(req.name)
        if name in UNLOCKED:
            continue
        lows = [s.version for s in req.specifier if s.operator in (">=", "==")]
        if name not in pins:
            bad.append(f"{req.name}: not in constraints.txt (run python scripts/lock.py)")
        elif not lows or Version(pins[name]).release[: len(Version(lows[0]).release)] != Version(lows[0]).release:
            bad.append(f"{req.name}: pyproject says {req.specifier or 'any'}, constraints.txt tests {pins[name]}")
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare pyproject's lower bounds with constraints.txt")
    args = p.parse_args()
    if not args.check:
        pins = resolve()
        CONSTRAINTS.write_text(HEADER + "".join(f"{n}=={v}\n" for n, v in pins.items()))
        print(f"wrote {len(pins)} pins to {CONSTRAINTS.name}")
    bad = bound_mismatches(read_constraints())
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
