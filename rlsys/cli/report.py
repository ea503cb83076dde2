"""rlsys-report RUN_DIR [--out FILE] [--max-trajectories N] [--iterations A:B] [--max-bytes N]
rlsys-report RUN_A RUN_B ... [--out FILE] [--iterations A:B]

Writes RUN_DIR/report.html: one self-contained page that opens offline from disk. It holds the
learning curves from metrics.jsonl (inline SVG, against iterations, env steps or time), the per-task
evaluation table, the resolved config and provenance, and a browser over a sample of the run's
trajectories: each step's screenshot as a JPEG thumbnail with the action drawn on it (the element acted
on, the click or tap point, typed text, a scroll or swipe arrow), the model's raw output and the parsed
action, the inputs the policy was given, reward, errors and feedback, the judge's verdict, and Digi-Q's
candidates with their Q, V and advantage. A shard that cannot be read, and a line of metrics.jsonl
that does not parse or holds something else than a number where the report counts, is named with the reason
(and the line); the rest of the run is still shown.

Given several run folders, it writes one page (default ./report-compare.html) with their curves overlaid,
one colour per run, and a table of the runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rlsys import __version__
from rlsys.report.run_report import (
    COMPARISON_PAGE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_TRAJECTORIES,
    parse_iterations,
    write_comparison,
    write_report,
)


def parse_bytes(text: str) -> int:
    units = {"k": 10**3, "m": 10**6, "g": 10**9}
    text = text.strip().lower().removesuffix("b")
    scale = units.get(text[-1:], 1)
    try:
        return int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 25000000, 25M, 500k)") from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="rlsys-report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    p.add_argument(
        "run_dirs",
        metavar="RUN_DIR",
        nargs="+",
        help="a run folder (runs/NAME); several draw their curves together on one page",
    )
    p.add_argument(
        "--out",
        help=f"where to write the page (default RUN_DIR/report.html; for several runs, ./{COMPARISON_PAGE})",
    )
    p.add_argument(
        "--max-trajectories",
        type=int,
        default=DEFAULT_MAX_TRAJECTORIES,
        help="trajectories to embed (default %(default)s)",
    )
    p.add_argument("--iterations", help="only iterations A:B (both included; A: and :B leave an end open)")
    p.add_argument(
        "--max-bytes",
        type=parse_bytes,
        default=DEFAULT_MAX_BYTES,
        help="screenshots stop once the embedded trajectories take this much (default 25M)",
    )
    args = p.parse_args(argv)
    if args.iterations:
        try:
            parse_iterations(args.iterations)
        except ValueError as e:
            p.error(str(e))
    if args.max_trajectories < 0:
        p.error("--max-trajectories must be 0 or more")
    run_dirs = [Path(d) for d in args.run_dirs]
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            print(f"rlsys-report: error: run folder not found: {run_dir}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    if len(run_dirs) > 1:
        path = write_comparison(run_dirs, args.out or COMPARISON_PAGE, args.iterations)
    else:
        path = write_report(run_dirs[0], args.out, args.max_trajectories, args.iterations, args.max_bytes)
    print(f"{path}  {path.stat().st_size / 1e6:.1f} MB  {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
