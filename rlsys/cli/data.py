"""Move trajectories between DigiRL's published data files and rlsys shards.

    rlsys-data import-digirl FILE.pt OUT_DIR --trust-pickle [--suite aitw-general] [--images-dir DIR]
    rlsys-data export-digirl IN_DIR OUT.pt [--gamma 0.5]
    rlsys-data summary DIR

DigiRL's `.pt` files are pickled lists of trajectories, each a list of step dicts (observation prompt,
BLIP-2 image features, screenshot path, action text, reward, done, Monte-Carlo return). `import-digirl`
turns one into rlsys shards (rlsys/data/shards.py) and `export-digirl` writes rlsys shards back in that
layout, so the original DigiRL code can be compared on the same data. `summary` describes a shard folder.

Loading a pickle runs whatever code the file names, so `import-digirl` refuses unless `--trust-pickle`
is given; nothing else in rlsys unpickles.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rlsys import __version__
from rlsys.data.digirl_files import (
    DIGIRL_GAMMA,
    DataError,
    export_digirl,
    import_digirl,
    load_shards,
    print_import_summary,
    summarize,
)


def print_summary(summary: dict) -> None:
    rate = summary["success_rate"]
    print(f"trajectories    {summary['trajectories']}")
    print(f"steps           {summary['steps']}")
    print(f"outcomes        {', '.join(f'{k} {v}' for k, v in summary['outcomes'].items()) or 'none'}")
    print(f"success rate    {'n/a' if rate is None else f'{100 * rate:.1f}%'} of {summary['trainable']} trainable")
    print(f"mean steps      {summary['mean_steps']:.2f}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsys-data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"rlsys {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    imp = commands.add_parser("import-digirl", help="convert a DigiRL .pt file into rlsys shards")
    imp.add_argument("file", type=Path, help="the DigiRL trajectories file (.pt)")
    imp.add_argument("out_dir", type=Path, help="a new or empty folder for the shards")
    imp.add_argument("--trust-pickle", action="store_true", help="allow unpickling FILE (it can run code)")
    imp.add_argument("--suite", default="aitw-general", help="Task.suite of the imported tasks")
    imp.add_argument("--images-dir", type=Path, help="where the screenshots are when image_path does not exist")
    imp.add_argument("--gamma", type=float, default=DIGIRL_GAMMA, help="to check the stored mc_return values")

    exp = commands.add_parser("export-digirl", help="write rlsys shards as a DigiRL .pt file")
    exp.add_argument("in_dir", type=Path, help="a shard folder or a single shard")
    exp.add_argument("out_file", type=Path, help="the .pt file to write")
    exp.add_argument("--gamma", type=float, default=DIGIRL_GAMMA, help="discount of the mc_return values")

    summ = commands.add_parser("summary", help="describe a shard folder")
    summ.add_argument("dir", type=Path, help="a shard folder or a single shard")
    return parser


def run(args: argparse.Namespace) -> None:
    if args.command == "import-digirl":
        summary = import_digirl(
            args.file,
            args.out_dir,
            suite=args.suite,
            images_dir=args.images_dir,
            gamma=args.gamma,
            trust_pickle=args.trust_pickle,
        )
        print_import_summary(summary, args.out_dir)
    elif args.command == "export-digirl":
        result = export_digirl(args.in_dir, args.out_file, gamma=args.gamma)
        print(
            f"exported {result['trajectories']} trajectories ({result['steps']} steps, feature dim "
            f"{result['feature_dim']} stacked) to {args.out_file}; skipped {result['skipped']} not trainable or empty"
        )
    else:
        print_summary(summarize(load_shards(args.dir)))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
