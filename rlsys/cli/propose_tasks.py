"""PAE's task proposer from the command line.

    rlsys-propose-tasks --config configs/pae_propose.yaml [key=value ...]

See rlsys/envs/web/task_proposer.py for what it asks and what it keeps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlsys import __version__
from rlsys.config import ConfigError, load_config
from rlsys.envs.web.task_proposer import (
    BASE_DELAY_S,
    MAX_DELAY_S,
    REASONS,
    load_examples,
    propose,
    read_output,
    write_atomic,
)
from rlsys.llm import make_client


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rlsys-propose-tasks", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    p.add_argument("--config", required=True, help="experiment YAML with a `proposer:` section")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. proposer.tasks_per_site=10")
    return p.parse_args(argv)


def main(argv=None, base_delay_s: float = BASE_DELAY_S, max_delay_s: float = MAX_DELAY_S) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        pcfg = cfg.proposer
        examples = load_examples(pcfg.examples, cfg.tasks.url_map)
        output = Path(pcfg.output) if pcfg.output else cfg.output_dir / "proposed_tasks.jsonl"
        lines, existing = read_output(output, cfg.tasks.url_map)
        try:
            client = make_client(pcfg.llm, key="proposer.llm")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        progress = lambda message: print(message, flush=True)
        rows, counts = propose(
            pcfg,
            client,
            examples,
            existing,
            url_map=cfg.tasks.url_map,
            base_delay_s=base_delay_s,
            max_delay_s=max_delay_s,
            progress=progress,
        )
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2

    if rows:
        lines += [json.dumps(row, ensure_ascii=False) for row in rows]
        write_atomic(output, "".join(line + "\n" for line in lines))
    summary = {
        "output": str(output),
        "provider": pcfg.llm.provider,
        "model_id": pcfg.llm.model_id,
        "new_tasks": len(rows),
        "tasks_in_file": len(lines),
        "counts": counts,
    }
    summary_path = output.with_name(output.name + ".summary.json")
    write_atomic(summary_path, json.dumps(summary, indent=1, ensure_ascii=False) + "\n")

    if lines:
        print(f"\n{len(rows)} new tasks; {output} holds {len(lines)} (use it as tasks.file)")
    else:
        print(f"\nno tasks kept; {output} not written")
    width = max([len(site) for site in counts["per_site"]] + [len(site) for site in counts["failed_sites"]] + [4])
    for site, kept in counts["per_site"].items():
        print(f"  {site:<{width}}  {kept} kept")
    for site in counts["failed_sites"]:
        print(f"  {site:<{width}}  failed (LLM error)")
    print("counts: " + ", ".join(f"{k} {counts[k]}" for k in ("proposed", *REASONS, "llm_errors")))
    print(f"summary: {summary_path}")
    sites = len(counts["per_site"]) + len(counts["failed_sites"])
    if counts["failed_sites"]:
        print(f"sites whose call failed: {', '.join(counts['failed_sites'])}", file=sys.stderr)
    return 1 if sites and len(counts["failed_sites"]) == sites else 0


if __name__ == "__main__":
    sys.exit(main())
