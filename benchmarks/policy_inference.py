"""Policy inference and weight publishing.

1. Generation throughput (actions/s) of each policy family at batch 1, 8 and 32: greedy
   `act()` on observations with a set-of-marks-sized prompt and a screenshot; prompts of
   different lengths, so batches are padded. Tiny presets on CPU by default; `--scale gpu`
   builds a T5-base-sized AutoUI and a 7B-sized LLaVA from configs (random weights) and
   reports peak GPU memory.
2. Weight publishing: the bytes and seconds to publish a version through the `WeightStore`
   and pull it in another actor, full state dict vs LoRA adapter only.
3. LoRA merged for acting: milliseconds per decoding step of greedy `act()` of a causal LM (d_model
   512, 4 layers) with an r 64 adapter merged into the base weights (`policy.lora.merge_for_acting`)
   or not, and without an adapter; and what merging a new version costs.

    python benchmarks/policy_inference.py --batches 1 8 32
    python benchmarks/policy_inference.py --only lora_merge
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

import torch
from PIL import Image

from rlsys.config import LoraConfig, PolicyConfig
from rlsys.core.types import Observation
from rlsys.policies import build_policy

RESULTS = Path(__file__).resolve().parent / "results"

TINY = {
    "tiny_t5": dict(kind="tiny_t5", d_model=64, d_ff=128, num_heads=4),
    "autoui": dict(kind="autoui", d_model=64, d_ff=128, num_heads=4, image_feature_dim=64, image_size=32),
    "vlm_llava": dict(kind="vlm", arch="llava", d_model=64, d_ff=128, num_heads=4),
    "vlm_qwen2_vl": dict(kind="vlm", arch="qwen2_vl", d_model=64, d_ff=128, num_heads=4),
}
GPU = {
    # T5-base: d_model 768, 12 + 12 layers, 12 heads, d_ff 3072; BLIP-2 ViT-g pooled feature 1408
    "autoui_base": dict(kind="autoui", d_model=768, d_ff=3072, num_layers=12, num_heads=12, image_size=224),
    # Llama-2-7B-sized language model behind a CLIP-L-sized tower
    "llava_7b": dict(kind="vlm", arch="llava", d_model=4096, d_ff=11008, num_layers=32, num_heads=32, image_size=336),
}

LORA_MERGE = dict(kind="causal_lm", d_model=512, d_ff=2048, num_layers=4)


def screenshot(seed: int, size=(1024, 768)) -> bytes:
    image = Image.new("RGB", size, (seed * 37 % 255, 120, 200))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def observations(n: int) -> list[Observation]:
    out = []
    for i in range(n):
        elements = "\n".join(f'[{j}] button "item {j}"' for j in range(5 + i % 20))
        out.append(Observation(screenshot(i), elements, "http://site.test/", f"open item {i % 7}"))
    return out


def throughput(name: str, spec: dict, batches: list[int], device: str, new_tokens: int) -> list[dict]:
    cfg = PolicyConfig(**spec, max_new_tokens=new_tokens, constrained=False)
    policy = build_policy(cfg, seed=0, device=device)
    params = sum(p.numel() for p in policy.parameters())
    rows = []
    for batch in batches:
        obs = observations(batch)
        policy.act(obs[:1], greedy=True)  # warm-up
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        reps = max(1, 64 // batch)
        fresh = [observations(batch) for _ in range(reps)]  # fresh observations: no cached features
        started = time.perf_counter()
        for obs in fresh:
            policy.act(obs, greedy=True)
        elapsed = time.perf_counter() - started
        row = {"policy": name, "params": params, "batch": batch, "actions_per_s": reps * batch / elapsed}
        if device.startswith("cuda"):
            row["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
        rows.append(row)
        print(json.dumps(row))
    return rows


def publish_cost(spec: dict, lora_r: int) -> list[dict]:
    import ray

    from rlsys.actors.weight_store import WeightStore, pull_if_newer
    from rlsys.policies.weights import pack_state_dict

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        store = ray.remote(WeightStore).remote()

        @ray.remote(num_cpus=0)
        def pull(store, version):
            import torch  # noqa: F401 - a worker's first import is not the pull's cost

            started = time.perf_counter()
            found = pull_if_newer(store, version)
            return time.perf_counter() - started, sum(v.numel() for v in found[1].values())

        for mode in ("full", "adapter"):
            lora = LoraConfig(enabled=True, r=lora_r, alpha=lora_r, dropout=0.0)
            policy = build_policy(PolicyConfig(**spec, lora=lora, publish=mode), seed=0)
            version = len(rows)
            started = time.perf_counter()
            state = policy.state_dict()
            nbytes = sum(v.numel() * v.element_size() for v in state.values())
            ray.get(store.publish.remote(version, pack_state_dict(state)))  # as the learner publishes
            publish_s = time.perf_counter() - started
            pull_s, numel = ray.get(pull.remote(store, version - 1))
            row = {"publish": mode, "lora_r": lora_r, "mib": nbytes / 2**20, "publish_s": publish_s, "pull_s": pull_s}
            rows.append(row | {"tensors_numel": numel})
            print(json.dumps(rows[-1]))
    finally:
        ray.shutdown()
    return rows


def timed_act(policy, obs: list[Observation], new_tokens: int) -> tuple[float, int]:
    """Seconds of one greedy `act` with `new_tokens` at most, and the decoding steps it took."""
    policy.cfg = replace(policy.cfg, max_new_tokens=new_tokens)
    started = time.perf_counter()
    lengths = [len(s.token_ids) for s in policy.act(obs, greedy=True)]
    return time.perf_counter() - started, min(new_tokens, max(lengths) + 1)  # + the step that wrote EOS


def lora_merge_cost(batch: int, new_tokens: int, device: str, reps: int = 5) -> list[dict]:
    """Per decoding step: the time of an act that writes `new_tokens` less one that writes one (the prompt's
    pass), over the steps between them. The three policies take turns and each keeps its fastest time, so
    other work on the machine disturbs them alike and little."""
    obs = observations(batch)
    policies = {}
    for adapter in ("none", "unmerged", "merged"):
        cfg = PolicyConfig(**LORA_MERGE, max_new_tokens=new_tokens, constrained=False)
        if adapter != "none":
            lora = LoraConfig(enabled=True, r=64, alpha=64, dropout=0.0, merge_for_acting=adapter == "merged")
            cfg = replace(cfg, lora=lora)
        policies[adapter] = policy = build_policy(cfg, seed=0, device=device)
        with torch.no_grad():  # a trained adapter: B is zero when it starts
            for name, param in policy.model.named_parameters():
                if "lora_B" in name:
                    param.normal_(std=0.01)
        policy.act(obs, greedy=True)  # warm-up, and the merge
    best = {adapter: [float("inf"), float("inf"), 0] for adapter in policies}
    for _ in range(reps):
        for adapter, policy in policies.items():
            long_s, steps = timed_act(policy, obs, new_tokens)
            prompt_s, _ = timed_act(policy, obs, 1)
            best[adapter] = [min(best[adapter][0], long_s), min(best[adapter][1], prompt_s), steps]
    rows = []
    for adapter, (long_s, prompt_s, steps) in best.items():
        row = {"adapter": adapter, "batch": batch, "steps": steps, "ms_per_act": 1e3 * long_s}
        row["ms_per_step"] = 1e3 * (long_s - prompt_s) / (steps - 1)
        if adapter == "merged":  # what a new version costs: the base weights copied back, the new delta added
            started = time.perf_counter()
            policies[adapter].merged_lora.unmerge()
            policies[adapter].merged_lora.merge()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            row["merge_ms"] = 1e3 * (time.perf_counter() - started)
        rows.append(row)
        print(json.dumps(row))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--scale", choices=["tiny", "gpu"], default="tiny")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--publish-d-model", type=int, default=512, help="LLaVA size for the publish measurement")
    parser.add_argument("--only", choices=["throughput", "publish", "lora_merge"], help="one measurement alone")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch's CPU threads")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    device = "cuda" if args.scale == "gpu" else "cpu"
    wanted = lambda part: args.only in (None, part)
    specs = GPU if args.scale == "gpu" else TINY
    out = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "device": device}}
    if wanted("throughput"):
        out["throughput"] = [
            r for name, spec in specs.items() for r in throughput(name, spec, args.batches, device, args.new_tokens)
        ]
    if wanted("publish") and args.scale == "tiny":
        d = args.publish_d_model
        out["publish_model"] = dict(kind="vlm", arch="llava", d_model=d, d_ff=4 * d, num_layers=8, num_heads=8)
        out["publish"] = publish_cost(out["publish_model"], lora_r=16)
    if wanted("lora_merge"):
        out["lora_merge_model"] = LORA_MERGE | {"lora_r": 64}
        out["lora_merge"] = lora_merge_cost(8, 32, device)
    RESULTS.mkdir(exist_ok=True)
    name = f"policy_inference_{args.scale}" + (f"_{args.only}" if args.only else "")
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
