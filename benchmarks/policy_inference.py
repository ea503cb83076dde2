"""Policy inference and weight publishing.

1. Generation throughput (actions/s) of each policy family at batch 1, 8 and 32: greedy
   `act()` on observations with a set-of-marks-sized prompt and a screenshot; prompts of
   different lengths, so batches are padded. Tiny presets on CPU by default; `--scale gpu`
   builds a T5-base-sized AutoUI and a 7B-sized LLaVA from configs (random weights) and
   reports peak GPU memory.
2. Weight publishing: the bytes and seconds to publish a version through the `WeightStore`
   and pull it in another actor, full state dict vs LoRA adapter only.

    python benchmarks/policy_inference.py --batches 1 8 32
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--scale", choices=["tiny", "gpu"], default="tiny")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--publish-d-model", type=int, default=512, help="LLaVA size for the publish measurement")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(os.cpu_count() or 1)
    device = "cuda" if args.scale == "gpu" else "cpu"
    specs = GPU if args.scale == "gpu" else TINY
    rows = [r for name, spec in specs.items() for r in throughput(name, spec, args.batches, device, args.new_tokens)]
    d = args.publish_d_model
    publish_spec = dict(kind="vlm", arch="llava", d_model=d, d_ff=4 * d, num_layers=8, num_heads=8)
    publish = publish_cost(publish_spec, lora_r=16) if args.scale == "tiny" else []
    out = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "device": device},
        "throughput": rows,
        "publish": publish,
        "publish_model": publish_spec,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"policy_inference_{args.scale}.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
