"""`policy.placement: vllm`: rollout inference on vLLM engines.

Each `VLLMEngine` is an async Ray actor holding one vLLM `AsyncLLM`; every runner's `act` becomes
concurrent requests that vLLM batches continuously. The engine pulls the learner's newest weights
from the weight store between requests:

- full weights: written as one safetensors file beside the engine and loaded in place
  (`reload_weights`), after in-flight requests finish (`pause_generation(mode="wait")`);
- a LoRA adapter (when the learner publishes the adapter alone): written as a peft folder and
  served as a new `LoRARequest` whose id is the version, with no pause and no restart. An id is a
  cache key in vLLM, so a version's id is never reused.

A vision-language policy's request also carries the screenshot (PNG bytes), which goes to vLLM as the
prompt's image (`multi_modal_data`). The runner sends the learner's prompt ids, with the image's
placeholder already expanded to one token per image feature; vLLM expands placeholders itself, so
the engine folds each run back to one and checks that vLLM's expansion gives the learner's ids again.

A sample carries the ids vLLM sampled, their log-probs (after temperature and the grammar mask:
`logprobs_mode = processed_logprobs`) and the weights version that made them. The learner trains
on those ids, not on the text tokenized again: constrained sampling may spell an action with
tokens the tokenizer would not choose.

vLLM pins an older transformers than rlsys, so this actor runs from its own environment
(`policy.vllm.python`, built by scripts/setup-vllm.sh) and this module imports nothing beyond the
standard library, Ray and, inside the actor, vLLM, torch and safetensors. A failed engine call
leaves vLLM unusable (a reload that fails halfway leaves half the weights unloaded), so the actor
exits and Ray starts it again, like a crashed runner; it then reloads the newest weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import ray

PULL_TIMEOUT_S = 60.0
WEIGHTS_FILE = "model.safetensors"


WORKDIR_PREFIX = "rlsys-vllm-"  # then the engine's pid: weights and adapters written for vLLM to load


def engine_name(index: int) -> str:
    return f"vllm-engine-{index}"


def remove_dead_workdirs() -> None:
    """An engine killed, or crashed, leaves its work folder behind; its successor clears it."""
    for folder in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        pid = folder.name.removeprefix(WORKDIR_PREFIX)
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def fold_runs(ids: list[int], token: int) -> list[int]:
    """`ids` with each run of `token` made one `token`: an image placeholder as it was before expansion."""
    return [t for i, t in enumerate(ids) if t != token or i == 0 or ids[i - 1] != token]


def write_safetensors(state: dict, path: Path) -> None:
    from safetensors.torch import save_file

    # clones: tied weights share memory, which safetensors refuses to write twice
    save_file({k: v.detach().clone().contiguous() for k, v in state.items()}, str(path))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class VLLMEngine:
    """`model_dir`: a folder or Hub id vLLM loads at start; None: the files of a model built from config,
    from the weight store (`put_model_files`), wherever the actor runs. `lora`: the adapter's r, lora_alpha
    and target_modules when the learner publishes adapters."""

    def __init__(
        self,
        weight_store,
        engine_args: dict,
        model_dir: str | None = None,
        lora: dict | None = None,
        max_new_tokens: int = 32,
        temperature: float = 1.0,
    ):
        self.weight_store = weight_store
        remove_dead_workdirs()
        self.workdir = Path(tempfile.gettempdir(), f"{WORKDIR_PREFIX}{os.getpid()}")
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir()
        self.model_dir = model_dir
        self.engine_args = engine_args
        self.lora = lora
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.engine = None
        self.tokenizer = None
        self.image_token_id = None
        self.version = -1
        self.lora_request = None
        self.adapter_dirs: list[Path] = []
        self.start_lock = asyncio.Lock()  # requests that arrive while the engine starts wait for it
        self.sync_lock = asyncio.Lock()
        self.weights_in_use = SharedUse()
        self.last_check = 0.0
        self.requests = 0
        self.weight_syncs = 0
        self.sync_s = 0.0

    async def start(self) -> dict:
        """Build the engine (also done by the first request); returns what it runs."""
        import vllm

        await self._engine()
        return {"vllm": vllm.__version__, "model": self.model_dir}

    async def _engine(self):
        async with self.start_lock:
            if self.engine is None:
                await self._start_engine()
        return self.engine

    async def _start_engine(self) -> None:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if self.model_dir is None:
            await self._fetch_model_files(self.workdir / "base")
        args = {"logprobs_mode": "processed_logprobs", **self.engine_args}
        if self.lora:
            # vLLM takes ranks 1, 8, 16, 32, ... 512: the smallest that holds r
            rank = max(8, 1 << (int(self.lora["r"]) - 1).bit_length())
            args.update(enable_lora=True, max_lora_rank=rank, max_loras=2)
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=self.model_dir, **args))
        self.tokenizer = self.engine.tokenizer
        self.image_token_id = getattr(self.engine.model_config.hf_config, "image_token_id", None)  # text models: none

    async def _fetch_model_files(self, folder: Path) -> None:
        (ref,) = await asyncio.wait_for(self.weight_store.get_model_files.remote(), PULL_TIMEOUT_S)
        folder.mkdir()
        for name, data in (await asyncio.wait_for(ref, PULL_TIMEOUT_S)).items():
            (folder / name).write_bytes(data)
        self.model_dir = str(folder)

    # -- acting

    async def generate(
        self,
        prompts: list[list[int]],
        regexes: list[str | None],
        greedy: bool = False,
        images: list[bytes] | None = None,
    ) -> list[dict]:
        """One sample per prompt (token ids, cut and framed by the policy as the learner does; with `images`,
        each prompt's screenshot as PNG bytes): text, token_ids (EOS left out), logprob (summed over the ids
        and the EOS, or None when the action was cut at max_new_tokens) and version."""
        await self._engine()
        await self._sync_weights()
        images = images or [None] * len(prompts)
        async with self.weights_in_use:  # a full reload waits for these requests, so `version` stays true
            version, lora_request = self.version, self.lora_request
            results = await asyncio.gather(
                *(
                    self._one(p, r, greedy, lora_request, image)
                    for p, r, image in zip(prompts, regexes, images, strict=True)
                ),
                return_exceptions=True,
            )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            self._die_if_dead(failed[0])
            raise failed[0]
        self.requests += len(prompts)
        return [{**r, "version": version} for r in results]

    async def _one(self, prompt: list[int], regex: str | None, greedy: bool, lora_request, image: bytes | None) -> dict:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        params = SamplingParams(
            temperature=0.0 if greedy else self.temperature,
            max_tokens=self.max_new_tokens + 1,  # one past the limit, to tell a cut action from a finished one
            logprobs=0,
            structured_outputs=StructuredOutputsParams(regex=regex) if regex else None,
        )
        final = None
        async for out in self.engine.generate(
            self._prompt(prompt, image), params, uuid.uuid4().hex, lora_request=lora_request
        ):
            final = out
        if list(final.prompt_token_ids) != prompt:
            raise ValueError(
                f"vLLM's prompt is not the learner's: {len(final.prompt_token_ids)} ids where the runner sent "
                f"{len(prompt)} (vLLM and the learner expand the image placeholder differently)"
            )
        sample = final.outputs[0]
        token_ids = list(sample.token_ids)
        logprobs = [step[t].logprob for t, step in zip(token_ids, sample.logprobs)]
        eos = self.tokenizer.eos_token_id
        if eos in token_ids:  # at most max_new_tokens + 1 ids: an action and its EOS
            end = token_ids.index(eos)
            logprob = float(sum(logprobs[: end + 1]))
        else:  # cut: the learner scores the text and an EOS that was never sampled here
            end, logprob = self.max_new_tokens, None
        return {"text": self.tokenizer.decode(token_ids[:end]), "token_ids": token_ids[:end], "logprob": logprob}

    def _prompt(self, ids: list[int], image: bytes | None):
        from vllm.inputs import TokensPrompt

        if image is None:
            return TokensPrompt(prompt_token_ids=ids)
        from PIL import Image

        with Image.open(io.BytesIO(image)) as im:
            picture = im.convert("RGB")
        return TokensPrompt(prompt_token_ids=fold_runs(ids, self.image_token_id), multi_modal_data={"image": picture})

    # -- weights

    async def _sync_weights(self, poll_s: float = 0.05) -> None:
        """The newest published weights, checked at most every `poll_s`; before the first publication, wait."""
        async with self.sync_lock:
            while True:
                if time.monotonic() - self.last_check >= poll_s or self.version < 0:
                    self.last_check = time.monotonic()
                    found = await asyncio.wait_for(self.weight_store.get_if_newer.remote(self.version), PULL_TIMEOUT_S)
                    if found is not None:
                        version, (ref,) = found
                        await self._load(version, await asyncio.wait_for(ref, PULL_TIMEOUT_S))
                if self.version >= 0:
                    return
                await asyncio.sleep(0.2)

    async def _load(self, version: int, state: dict) -> None:
        started = time.perf_counter()
        if self.lora:
            self._load_adapter(version, state)
        else:
            await self._load_full(state)
        self.version = version
        self.weight_syncs += 1
        self.sync_s += time.perf_counter() - started

    async def _load_full(self, state: dict) -> None:
        folder = self.workdir / "weights"
        folder.mkdir(exist_ok=True)
        write_safetensors(state, folder / WEIGHTS_FILE)
        async with self.weights_in_use.exclusive():
            await self.engine.pause_generation(mode="wait", clear_cache=True)
            try:
                await self.engine.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
            except BaseException:
                os._exit(1)  # some weights may be unloaded now: a new actor, not a half-loaded model
            await self.engine.resume_generation()

    def _load_adapter(self, version: int, state: dict) -> None:
        from vllm.lora.request import LoRARequest

        folder = self.workdir / f"adapter-v{version}"
        folder.mkdir(exist_ok=True)
        write_safetensors(state, folder / "adapter_model.safetensors")
        config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "bias": "none", **self.lora}
        (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": self.model_dir}))
        self.lora_request = LoRARequest(f"policy-v{version}", version + 1, str(folder))
        self.adapter_dirs.append(folder)
        if len(self.adapter_dirs) > 3:  # requests still running may use the last two
            shutil.rmtree(self.adapter_dirs.pop(0), ignore_errors=True)

    def _die_if_dead(self, error: BaseException) -> None:
        """vLLM cannot recover from a dead engine: exit, and Ray starts a new actor."""
        from vllm.v1.engine.exceptions import EngineDeadError

        if isinstance(error, EngineDeadError):
            os._exit(1)

    def stats(self) -> dict:
        return {
            "vllm/requests": self.requests,
            "vllm/weight_syncs": self.weight_syncs,
            "vllm/sync_s": self.sync_s,
            "policy_version": self.version,
        }

    def pid(self) -> int:
        return os.getpid()

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
        shutil.rmtree(self.workdir, ignore_errors=True)


class SharedUse:
    """Requests share the weights (`async with`); a reload takes them alone (`async with .exclusive()`),
    after the requests already running, and ahead of those that come after it asked."""

    def __init__(self):
        self.users = 0
        self.exclusive_wanted = False
        self.changed = asyncio.Condition()

    async def __aenter__(self):
        async with self.changed:
            await self.changed.wait_for(lambda: not self.exclusive_wanted)
            self.users += 1

    async def __aexit__(self, *_):
        async with self.changed:
            self.users -= 1
            self.changed.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self):
        async with self.changed:
            await self.changed.wait_for(lambda: not self.exclusive_wanted)
            self.exclusive_wanted = True
            await self.changed.wait_for(lambda: self.users == 0)
        try:
            yield
        finally:
            async with self.changed:
                self.exclusive_wanted = False
                self.changed.notify_all()


RemoteVLLMEngine = ray.remote(VLLMEngine)
