"""Model folders for rlsys and for serving: each command reads a folder or a Hugging Face Hub id and writes a
standalone Hugging Face model folder, which appears only when complete.

    rlsys-models merge-lora runs/NAME/checkpoints/000012 OUT   # a LoRA checkpoint's adapter merged into its base
    rlsys-models blip2-vision Salesforce/blip2-opt-2.7b OUT    # BLIP-2's vision tower, for policy.vision_path
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from rlsys import __version__
from rlsys.config import ConfigError
from rlsys.policies.hub import model_folder

VISION_PREFIX = "vision_model."


class ModelCommandError(Exception):
    pass


def check_output(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ModelCommandError(f"OUT {out} already exists and is not an empty folder; choose a new one")


def write_folder(out: Path, fill: Callable[[Path], None]) -> None:
    """Call `fill(staging)` on a hidden folder beside `out`, then rename it to `out`: a crash leaves no half model."""
    check_output(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.writing-", dir=out.parent))
    try:
        fill(staging)
        if out.exists():
            out.rmdir()
        os.rename(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# -- merge-lora


def lora_folder(checkpoint: Path) -> Path:
    """The policy folder of a checkpoint (CHECKPOINT/policy) or the folder itself; it must hold a LoRA adapter."""
    from rlsys.policies.lora_checkpoint import ADAPTER_DIR

    folder = checkpoint / "policy" if (checkpoint / "policy").is_dir() else checkpoint
    if not folder.is_dir():
        raise ModelCommandError(f"CHECKPOINT {checkpoint} is not a folder")
    if not (folder / ADAPTER_DIR).is_dir():
        raise ModelCommandError(
            f"CHECKPOINT {checkpoint}: {folder} holds no LoRA adapter ({ADAPTER_DIR}/); a checkpoint without LoRA is "
            "already a standalone model folder"
        )
    return folder


def merge_lora(checkpoint: Path, out: Path) -> dict:
    """The adapter of a LoRA checkpoint merged into its base (peft's merge_and_unload), saved with the base's
    processor or tokenizer as a plain Hugging Face model folder."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    from rlsys.policies.lora_checkpoint import ADAPTER_DIR, lora_base
    from rlsys.policies.vlm_inputs import VisionTextInputs

    folder = lora_folder(checkpoint)
    check_output(out)
    base, source = lora_base(folder)
    model = AutoModelForImageTextToText.from_pretrained(base, dtype="auto")
    merged = PeftModel.from_pretrained(model, folder / ADAPTER_DIR).merge_and_unload()

    def fill(staging: Path) -> None:
        merged.save_pretrained(staging)
        VisionTextInputs.from_pretrained(base).save_pretrained(staging)

    write_folder(out, fill)
    return {
        "base": source.name if source else str(folder / "base"),
        "parameters": sum(p.numel() for p in merged.parameters()),
    }


# -- blip2-vision


def blip2_vision(src: str, out: Path) -> dict:
    """The vision tower of a BLIP-2 checkpoint (folder or Hub id) as a standalone `Blip2VisionModel` folder,
    read tensor by tensor: the language model is never loaded."""
    import torch
    from transformers import Blip2VisionConfig, Blip2VisionModel

    folder = model_folder(src, "SRC")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ModelCommandError(f"SRC {src}: {folder} is not a model folder (no config.json)")
    config = json.loads(config_file.read_text())
    if config.get("model_type") == "blip_2_vision_model":
        raise ModelCommandError(f"SRC {src} is already a Blip2VisionModel folder; policy.vision_path takes it as it is")
    if config.get("model_type") != "blip-2":
        raise ModelCommandError(f"SRC {src} is not a BLIP-2 checkpoint (model_type {config.get('model_type')!r})")
    check_output(out)
    state = vision_tensors(folder)
    with torch.device("meta"):
        vision = Blip2VisionModel(Blip2VisionConfig(**config.get("vision_config", {})))
    vision.load_state_dict(state, strict=True, assign=True)
    write_folder(out, vision.save_pretrained)
    return {"parameters": sum(t.numel() for t in state.values()), "hidden_size": vision.config.hidden_size}


def vision_tensors(folder: Path) -> dict:
    """The `vision_model.*` tensors of a model folder (safetensors, else PyTorch weights), without the prefix."""
    import torch
    from safetensors import safe_open

    for weights, index in (
        ("model.safetensors", "model.safetensors.index.json"),
        ("pytorch_model.bin", "pytorch_model.bin.index.json"),
    ):
        if (folder / index).is_file():
            weight_map = json.loads((folder / index).read_text())["weight_map"]
            files = sorted({f for k, f in weight_map.items() if k.startswith(VISION_PREFIX)})
        elif (folder / weights).is_file():
            files = [weights]
        else:
            continue
        state = {}
        for name in files:
            if name.endswith(".safetensors"):
                with safe_open(folder / name, framework="pt") as f:
                    state |= {k: f.get_tensor(k) for k in f.keys() if k.startswith(VISION_PREFIX)}
            else:
                tensors = torch.load(folder / name, map_location="cpu", weights_only=True, mmap=True)
                state |= {k: v for k, v in tensors.items() if k.startswith(VISION_PREFIX)}
        if not state:
            raise ModelCommandError(f"{folder}: no {VISION_PREFIX}* weights in {', '.join(files) or weights}")
        return {k.removeprefix(VISION_PREFIX): v for k, v in state.items()}
    raise ModelCommandError(f"{folder}: no model.safetensors or pytorch_model.bin (nor a sharded index)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rlsys-models", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--version", action="version", version=f"rlsys {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge-lora", help="merge a LoRA checkpoint's adapter into a standalone model folder")
    merge.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoint folder (holding policy/) or a policy")
    merge.add_argument("out", metavar="OUT", help="a new or empty folder")
    vision = sub.add_parser("blip2-vision", help="extract BLIP-2's vision tower as a Blip2VisionModel folder")
    vision.add_argument("src", metavar="SRC", help="a BLIP-2 model folder or Hugging Face Hub id")
    vision.add_argument("out", metavar="OUT", help="a new or empty folder")
    args = p.parse_args(argv)
    try:
        if args.command == "merge-lora":
            info = merge_lora(Path(args.checkpoint), Path(args.out))
            print(f"{args.out}: {info['parameters'] / 1e6:.1f}M parameters, LoRA merged into {info['base']}")
        else:
            info = blip2_vision(args.src, Path(args.out))
            print(
                f"{args.out}: Blip2VisionModel, {info['parameters'] / 1e6:.1f}M parameters, "
                f"hidden size {info['hidden_size']} (policy.image_feature_dim)"
            )
    except (ModelCommandError, ConfigError, FileNotFoundError) as e:
        print(f"rlsys-models {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
