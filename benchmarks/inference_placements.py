"""Rollout inference placements at equal concurrency: `server` (one HF-transformers replica that batches
requests, actors/inference_server.py) against `vllm` (one vLLM engine, actors/vllm_placement.py).

For each placement, weights variant and concurrency C, a fresh server or engine is started with the same
batch room: the server's `max_batch` = C, the engine's `max_num_seqs` = C. Then:

1. Throughput: C caller threads, each a runner's own view of the placement (`ServedPolicy` /
   `EnginePolicy`, as the runners use them), send one observation per request, again and again:
   `--warmup` requests each, then `--rounds` timed ones from a common start. Sampling at temperature 1
   under the element grammar each observation carries, pages of mixed sizes. Actions/s: the timed
   requests over the wall time from the common start to the last answer; p50/p95 latency per request.
2. Time to new weights: while the C callers keep acting, a new version is published to the weight store
   `--swaps` times; for each, the seconds from the publish call returning to the first answer carrying
   that version (median reported, all values kept). Variant `full`: the whole state dict (a model of
   another seed; with `--path`, the checkpoint's own weights under a new version number). Variant `lora`
   (`policy.lora.enabled`, `policy.publish: adapter`): the adapter alone, with small random lora_B
   weights so that it changes the outputs; the engine serves it as a new LoRARequest.
3. Log-prob mismatch: `--mismatch-samples` actions sampled by the placement, scored by a learner in this
   process with the weights it served (teacher forcing on the sampled ids): |difference| per action and
   per token.
4. Start-up: seconds from asking for the server or engine until its model is loaded (the engine's
   includes what `start_engines` does in the driver: building the policy to ship or name its model),
   and the first request alone (its first weight pull, warm-up of the kernels).

The model is a causal_lm built from config (`--d-model`, a multiple of 64, `--layers`; random weights,
byte-level tokenizer) or a checkpoint (`--path`, a folder or Hub id). Results go to
results/inference_placements.json.

    python benchmarks/inference_placements.py --concurrency 1 8 --rounds 20

On a GPU (not measured here; the command to run there):

    python benchmarks/inference_placements.py --path Qwen/Qwen2.5-7B-Instruct --num-gpus 1 --concurrency 32
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ray
import torch

from rlsys.actors.inference_server import ServedPolicy, start_servers
from rlsys.actors.weight_store import WeightStore
from rlsys.config import Config, load_config
from rlsys.core.types import Observation
from rlsys.driver.ray_init import SUBREAPER, bind_to_loopback
from rlsys.envs.web.spaces.element import grammar
from rlsys.policies import build_policy
from rlsys.policies.weights import pack_state_dict

RESULTS = Path(__file__).resolve().parent / "results"
PAGE_SIZES = (2, 5, 9, 14, 20, 30)  # elements per page; the largest fill most of max_prompt_tokens
SEED = 0


# -- observations


def observation(n_elements: int, index: int) -> Observation:
    """A page of `n_elements` buttons, two of them text inputs, with the element grammar an env publishes."""
    editable = {0, n_elements // 2}
    elements = [
        {"tag": "input" if i in editable else "button", "text": f"item {i}", "editable": i in editable}
        for i in range(n_elements)
    ]
    ui = "\n".join(f'[{i}] {e["tag"]} "{e["text"]}"' for i, e in enumerate(elements))
    task = f"Click on item {index % n_elements}."
    return Observation(b"", ui, "about:blank", task, {"grammar": grammar(elements, max_text=8).to_dict()})


def page(caller: int, request: int) -> Observation:
    """Caller i's request r: page sizes rotate, so every batch mixes prompt lengths."""
    return observation(PAGE_SIZES[(caller + request) % len(PAGE_SIZES)], caller + request)


# -- configs and weights


def make_config(args, placement: str, variant: str, concurrency: int) -> Config:
    policy = {
        "kind": "causal_lm",
        "path": args.path,
        "d_model": args.d_model,
        "d_ff": 4 * args.d_model,
        "num_layers": args.layers,
        "dtype": "bfloat16" if args.num_gpus > 0 else "auto",  # what a GPU learner trains and publishes
        "placement": placement,
        # the single server replica runs on one device whatever it reserves
        "server": {"max_batch": concurrency, "max_wait_ms": args.max_wait_ms, "num_gpus": args.num_gpus},
        "vllm": {
            "max_num_seqs": concurrency,
            "num_gpus": args.num_gpus,
            "tensor_parallel_size": max(1, int(args.num_gpus)),
            "enforce_eager": args.num_gpus == 0,  # no CUDA graphs to capture on CPU: a faster start
            "start_timeout_s": 1800,
        },
    }
    if variant == "lora":
        policy |= {"lora": {"enabled": True, "r": args.lora_r, "alpha": 2 * args.lora_r, "dropout": 0.0}}
        policy |= {"publish": "adapter"}
    data = {"run": {"name": "inference-placements", "seed": SEED}, "ray": {"dashboard": False}, "policy": policy}
    return load_config(None, data=data)


def weight_states(cfg: Config) -> list[dict]:
    """Two states to publish in turn: the learner's first (the one the server and engine start from) and
    another one of the same shapes."""
    learner = build_policy(cfg.policy, seed=cfg.run.seed)
    first = learner.state_dict()
    if learner.adapter_only:  # a fresh adapter's lora_B is zero: give the second one weights
        g = torch.Generator().manual_seed(1)
        second = {
            k: (0.01 * torch.randn(v.shape, generator=g)).to(v.dtype) if "lora_B" in k else v for k, v in first.items()
        }
    elif cfg.policy.path:  # a second copy of a checkpoint would double the driver's memory: same weights, new version
        second = first
    else:
        second = build_policy(cfg.policy, seed=cfg.run.seed + 1).state_dict()
    return [first, second]


# -- the placements


def start(placement: str, cfg: Config, store) -> tuple[object, dict]:
    """The server or engine, with its model loaded; what it runs."""
    if placement == "server":
        (server,) = start_servers(cfg, store, seed=SEED)
        ray.get(server.stats.remote())  # answers once the actor has built its policy
        return server, {}
    from rlsys.actors.vllm_placement import start_engines

    (engine,) = start_engines(cfg, store, seed=SEED)
    return engine, {"vllm": ray.get(engine.start.remote())["vllm"]}  # not the model's folder: a local path


def view(placement: str, actor, cfg: Config):
    if placement == "server":
        return ServedPolicy(actor)
    from rlsys.actors.vllm_placement import EnginePolicy

    return EnginePolicy(actor, cfg.policy)


def stop(placement: str, actor) -> None:
    try:
        if placement == "vllm":
            ray.get(actor.shutdown.remote(), timeout=60)
    finally:
        ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 60  # the next one must not meet this one's memory (GPU) still held
    while time.monotonic() < deadline:
        try:
            ray.get(actor.stats.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return
        time.sleep(0.5)


# -- measurements


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def throughput(views: list, warmup: int, rounds: int) -> dict:
    """Each caller warms up, waits for the others, then sends `rounds` requests one after another."""
    callers = len(views)
    barrier = threading.Barrier(callers + 1)
    latencies: list[list[float]] = [[] for _ in views]
    ends = [0.0] * callers

    def caller(i: int) -> None:
        try:
            for r in range(warmup):
                views[i].act([page(i, r)])
        except BaseException:
            barrier.abort()
            raise
        barrier.wait()
        for r in range(warmup, warmup + rounds):
            sent = time.perf_counter()
            views[i].act([page(i, r)])
            latencies[i].append(time.perf_counter() - sent)
        ends[i] = time.perf_counter()

    with ThreadPoolExecutor(callers) as pool:
        futures = [pool.submit(caller, i) for i in range(callers)]
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass  # a caller failed: its future says how
        started = time.perf_counter()
        errors = [f.exception() for f in futures]
    failures = [e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)]
    if failures:
        raise failures[0]
    wall = max(ends) - started
    flat = [s for per_caller in latencies for s in per_caller]
    return {
        "requests": len(flat),
        "wall_s": wall,
        "actions_per_s": len(flat) / wall,
        "latency_p50_ms": 1000 * percentile(flat, 0.5),
        "latency_p95_ms": 1000 * percentile(flat, 0.95),
    }


def time_to_new_weights(views: list, store, states: list[dict], swaps: int, timeout_s: float) -> dict:
    """Callers act without pause; each new version is published once the previous one has been served."""
    stop_event = threading.Event()
    changed = threading.Condition()
    first_seen: dict[int, float] = {}  # version -> when the first answer carrying it came back
    latencies: list[float] = []

    def caller(i: int) -> None:
        r = 0
        while not stop_event.is_set():
            sent = time.perf_counter()
            (sample,) = views[i].act([page(i, r)])
            now = time.perf_counter()
            r += 1
            with changed:
                latencies.append(now - sent)
                first_seen.setdefault(sample.version, now)
                changed.notify_all()

    def served_after(version: int) -> float | None:
        """When the first answer carrying `version` or newer came back (call holding `changed`)."""
        times = [t for v, t in first_seen.items() if v >= version]
        return min(times) if times else None

    delays = []
    version = ray.get(store.get_version.remote())
    with ThreadPoolExecutor(len(views)) as pool:
        futures = [pool.submit(caller, i) for i in range(len(views))]

        def failed() -> bool:  # a caller that raised ends the waits below
            return any(f.done() for f in futures)

        try:
            with changed:  # every caller is under way before the first swap
                changed.wait_for(lambda: len(latencies) >= len(views) or failed(), timeout_s)
            for new in range(version + 1, version + 1 + swaps):
                ray.get(store.publish.remote(new, pack_state_dict(states[new % len(states)])))
                published = time.perf_counter()
                with changed:
                    changed.wait_for(lambda v=new: served_after(v) is not None or failed(), timeout_s)
                    if served_after(new) is None:
                        break
                    delays.append(served_after(new) - published)
                time.sleep(0.2)  # a few requests on the new weights before the next swap
        finally:
            stop_event.set()
        for future in futures:
            future.result()
    if len(delays) < swaps:
        raise RuntimeError(f"a new version was not served within {timeout_s} s")
    return {
        "new_weights_median_s": statistics.median(delays),
        "new_weights_s": delays,
        "swap_phase_latency_p95_ms": 1000 * percentile(latencies, 0.95),
    }


def logprob_mismatch(view, cfg: Config, state: dict, samples: int) -> dict:
    """|behaviour log-prob the placement reported - the learner's teacher-forced one| on the ids it sampled,
    per action and per token, with the weights it served (`state`)."""
    learner = build_policy(cfg.policy, seed=SEED)
    learner.load_state_dict(state)
    learner.eval()
    observations = [page(i, 0) for i in range(samples)]
    acted = [s for s in view.act(observations) if s.logprob is not None]
    observations = observations[: len(acted)]
    token_ids = [s.token_ids for s in acted] if all(s.token_ids for s in acted) else None
    with torch.no_grad():
        logp, mask = learner.token_logprobs(observations, [s.text for s in acted], token_ids)
    gap = (logp.sum(-1) - torch.tensor([s.logprob for s in acted])).abs()
    return {
        "logprob_gap_mean": float(gap.mean()),
        "logprob_gap_max": float(gap.max()),
        "logprob_gap_per_token_mean": float((gap / mask.sum(-1)).mean()),
        "logprob_gap_actions": len(acted),
    }


def measure(args, placement: str, variant: str, concurrency: int, states: list[dict]) -> dict:
    cfg = make_config(args, placement, variant, concurrency)
    store = ray.remote(WeightStore).options(num_cpus=0).remote()
    ray.get(store.publish.remote(0, pack_state_dict(states[0])))
    started = time.perf_counter()
    actor, runs = start(placement, cfg, store)
    start_s = time.perf_counter() - started
    try:
        views = [view(placement, actor, cfg) for _ in range(concurrency)]
        started = time.perf_counter()
        views[0].act([page(0, 0)])
        first_act_s = time.perf_counter() - started
        row = {"placement": placement, "weights": variant, "concurrency": concurrency, **runs}
        row |= {"start_s": start_s, "first_act_s": first_act_s}
        row |= throughput(views, args.warmup, args.rounds)
        if args.mismatch_samples:
            row |= logprob_mismatch(views[0], cfg, states[0], args.mismatch_samples)
        row |= time_to_new_weights(views, store, states, args.swaps, args.swap_timeout_s)
        row["actor_stats"] = ray.get(actor.stats.remote())
    finally:
        stop(placement, actor)
        ray.kill(store)
    print(json.dumps({k: v for k, v in row.items() if k != "actor_stats"}), flush=True)
    return row


def machine(args) -> dict:
    import transformers

    info = {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__}
    info |= {"transformers": transformers.__version__, "ray": ray.__version__}
    info["device"] = torch.cuda.get_device_name(0) if args.num_gpus > 0 and torch.cuda.is_available() else "cpu"
    return info


def table(rows: list[dict]) -> str:
    lines = [
        f"{'placement':9} {'weights':7} {'C':>3} {'start s':>8} {'actions/s':>9} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'new weights s':>13} {'|dlogp| mean/max':>17}"
    ]
    for r in rows:
        lines.append(
            f"{r['placement']:9} {r['weights']:7} {r['concurrency']:>3} {r['start_s']:>8.1f} "
            f"{r['actions_per_s']:>9.2f} {r['latency_p50_ms']:>8.1f} {r['latency_p95_ms']:>8.1f} "
            f"{r['new_weights_median_s']:>13.3f} "
            f"{r.get('logprob_gap_mean', float('nan')):>8.4f}/{r.get('logprob_gap_max', float('nan')):.4f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--placements", nargs="+", choices=["server", "vllm"], default=["server", "vllm"])
    parser.add_argument("--weights", nargs="+", choices=["full", "lora"], default=["full", "lora"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=20, help="timed requests per caller")
    parser.add_argument("--warmup", type=int, default=2, help="untimed requests per caller first")
    parser.add_argument("--swaps", type=int, default=5, help="new versions published per measurement")
    parser.add_argument("--swap-timeout-s", type=float, default=300.0)
    parser.add_argument("--d-model", type=int, default=256, help="a multiple of 64 (the heads are 64 wide)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--path", default=None, help="a checkpoint folder or Hub id instead of a model from config")
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument(
        "--mismatch-samples", type=int, default=32, help="actions scored by a learner in this process (0: none)"
    )
    parser.add_argument("--num-gpus", type=float, default=0.0, help="for the server and for the engine")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="the server's wait to fill a batch")
    parser.add_argument("--num-cpus", type=int, default=None, help="Ray's CPUs (default: all)")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault(SUBREAPER, "true")
    bind_to_loopback()
    ray.init(num_cpus=args.num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        for variant in args.weights:
            states = weight_states(make_config(args, "server", variant, 1))
            for placement in args.placements:
                for concurrency in args.concurrency:
                    rows.append(measure(args, placement, variant, concurrency, states))
    finally:
        ray.shutdown()
    settings = {k: v for k, v in vars(args).items() if k not in ("placements", "weights", "concurrency")}
    out = {"machine": machine(args), "settings": settings | {"page_sizes": PAGE_SIZES}, "results": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "inference_placements.json").write_text(json.dumps(out, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
