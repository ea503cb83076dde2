"""A token budget per forward and backward pass (`learner.max_tokens_per_micro_batch`).

A micro-batch of long sequences (a VLM's prompt is ~1,200 tokens with its image) can hold more activations
than the GPU has memory for. Cut into chunks of at most the budget's tokens, each chunk's gradient is added to
the others' before the step divides by the whole batch's count (ModuleOptimizer.step), so the update is the
one the config describes, only in smaller pieces. Rows are sorted by length first, so a padded chunk holds
rows of similar length and little padding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

HEADROOM = 0.7  # of the free memory left after the optimizer's own state, for activations


def split_by_tokens(items: list, lengths: Sequence[int], budget: int, packed: bool) -> list[list]:
    """Chunks of `items`, longest first, each within `budget` tokens: the sum of its lengths when packed,
    else its row count times its longest row (padding counts). As few chunks as a greedy cut needs, with rows
    spread evenly over them where that fits (8 + 8 rows rather than 15 + 1). A row longer than the budget is
    a chunk alone."""
    order = sorted(range(len(items)), key=lambda i: -lengths[i])

    def cost(chunk: list[int]) -> int:
        return sum(lengths[i] for i in chunk) if packed else len(chunk) * lengths[chunk[0]]

    greedy: list[list[int]] = []
    for i in order:
        if greedy and cost(greedy[-1] + [i]) <= budget:
            greedy[-1].append(i)
        else:
            greedy.append([i])
    count = len(greedy)
    even = [order[k * len(order) // count : (k + 1) * len(order) // count] for k in range(count)]
    chunks = even if all(cost(c) <= budget for c in even) else greedy
    return [[items[i] for i in chunk] for chunk in chunks]


def activation_bytes_per_token(model_config, element_bytes: int, checkpointing: bool) -> int | None:
    """An estimate of the activations backward keeps per token: per layer about ten hidden-width and three and
    a half feed-forward-width tensors (attention without its square, as SDPA and flash attention keep it); with
    activation checkpointing, each layer's input and one layer recomputed. None for a config it cannot read."""
    text = getattr(model_config, "text_config", None) or model_config
    hidden = getattr(text, "hidden_size", None) or getattr(text, "d_model", None)
    ff = getattr(text, "intermediate_size", None) or getattr(text, "d_ff", None)
    layers = getattr(text, "num_hidden_layers", None) or (
        getattr(text, "num_layers", 0) + (getattr(text, "num_decoder_layers", None) or 0)
    )
    if not (hidden and ff and layers):
        return None
    layer = (10 * hidden + 3.5 * ff) * element_bytes
    return int(layers * hidden * element_bytes + layer if checkpointing else layers * layer)


def token_budget(setting: int | str, policy) -> int | None:
    """`learner.max_tokens_per_micro_batch` resolved for this policy: an int, or None for no limit. auto sizes it
    from the GPU's free memory (after room for gradients and Adam's two moments of the trainable weights), and
    sets no limit on CPU or for a model whose sizes it cannot read."""
    if setting == "off":
        return None
    if isinstance(setting, int):
        return setting
    model = getattr(policy, "model", None)
    weights = list(policy.parameters()) if model is not None else []
    if not weights or weights[0].device.type != "cuda":
        return None
    per_token = activation_bytes_per_token(
        model.config, weights[0].element_size(), bool(getattr(policy.cfg, "gradient_checkpointing", False))
    )
    if per_token is None:
        return None
    free, _ = torch.cuda.mem_get_info(weights[0].device)
    optimizer_state = 3 * sum(p.numel() * p.element_size() for p in weights)
    return max(256, int(HEADROOM * (free - optimizer_state) / per_token))
