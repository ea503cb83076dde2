"""EnvRunner: a Ray actor owning one env and a policy replica, playing whole episodes."""

from __future__ import annotations

import os
import time
import zlib
from contextlib import contextmanager

import ray

from rlsys import envs
from rlsys.actors.emulators import NodePool
from rlsys.actors.placement import runner_policy
from rlsys.actors.weight_store import pull_if_newer
from rlsys.config import Config
from rlsys.core.env import EnvBrokenError
from rlsys.core.types import Step, Task, Trajectory
from rlsys.envs.evaluators.referee import Referee
from rlsys.llm import LLMError

# Keys of an env's step info that the Step already holds elsewhere.
_STEP_FIELDS = ("action", "parse_error", "action_error")


def evaluation_seed(run_seed: int, task: Task) -> int:
    """The seed of an evaluation episode's draws (an untrained policy's greedy ties, a random policy's choices):
    the same for a task whichever runner plays it and whatever that runner played before, so that one run seed
    gives one evaluation however the episodes are shared out among the runners."""
    return zlib.crc32(f"{run_seed}/{task.id}".encode())


class EnvRunner:
    def __init__(self, runner_id: str, cfg: Config, weight_store, seed: int, policy_server=None, evaluator=None):
        from rlsys.policies import needs_torch

        self.runner_id = runner_id
        self.cfg = cfg
        self.weight_store = weight_store
        # `placement: server` or `vllm`: a shared actor acts and keeps its own weights current
        self.served = policy_server is not None
        # PyTorch only where this process runs a model: a served, hosted or random policy keeps it small
        self.uses_torch = not self.served and needs_torch(cfg.policy.kind)
        if self.uses_torch:
            import torch

            torch.set_num_threads(1)  # many runners share few cores; inference is tiny
        # a replica is built with the run seed (runner_policy); this runner's own seed then drives its sampling
        self.policy = runner_policy(cfg, policy_server)
        if self.uses_torch:
            torch.manual_seed(seed)
        elif hasattr(self.policy, "manual_seed"):  # a policy that samples without torch has its own generator
            self.policy.manual_seed(seed)
        self.policy.version = -1  # nothing pulled yet
        self.referee = Referee(cfg.evaluator, evaluator)
        self.env = None
        self.envs_created = 0
        self.episode_steps = 0  # steps taken so far in the episode being played
        self.closed = False

    def _ensure_env(self):
        if self.closed:  # close() ran while this episode was starting: never leave a browser behind
            raise EnvBrokenError("runner is shutting down")
        if self.env is None:
            self.envs_created += 1
            # WebArena's fuzzy_match checks ask the judge's model, when there is one
            fuzzy = self.referee.judge.fuzzy_match if self.referee.judge is not None else None
            env_id = f"{self.runner_id}/env{self.envs_created}"
            self.env = envs.make_env(self.cfg.env, env_id, fuzzy, emulators=NodePool(self.cfg))
        return self.env

    def _drop_env(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            try:
                env.close()
            except Exception:
                pass

    def sync_weights(self, wait_s: float = 600.0) -> int:
        """Pull the newest weights if the store has moved on; called at episode boundaries.
        Before the first publication it waits: a runner never acts with weights of its own."""
        if self.served:
            return self.policy.version
        deadline = time.monotonic() + wait_s
        while True:
            found = self._pull_if_newer()
            if found is not None:
                version, state = found
                self.policy.load_state_dict(state, version)
            if self.policy.version >= 0:
                return self.policy.version
            if time.monotonic() > deadline:
                raise TimeoutError(f"no weights were published within {wait_s}s")
            time.sleep(0.2)

    def _pull_if_newer(self, timeout_s: float = 60.0) -> tuple[int, dict] | None:
        """The newest published (version, state dict), if newer than ours. A policy without weights (random,
        hosted) takes the version alone: the state is never fetched, so this process never loads torch."""
        if self.uses_torch:
            return pull_if_newer(self.weight_store, self.policy.version, timeout_s)
        found = ray.get(self.weight_store.get_if_newer.remote(self.policy.version), timeout=timeout_s)
        return None if found is None else (found[0], {})

    def run_episode(self, task: Task, explore: bool = True) -> Trajectory:
        if explore:
            return self._play(task, explore)
        with self._draws_seeded(evaluation_seed(self.cfg.run.seed, task)):
            return self._play(task, explore)

    @contextmanager
    def _draws_seeded(self, seed: int):
        """The policy's draws inside come from `seed`; this runner's own stream (its training episodes') then
        goes on where it was. A served policy draws in its server, out of reach here."""
        if self.uses_torch:
            import torch

            with torch.random.fork_rng(devices=[]):  # runners' policies are on the CPU
                torch.random.default_generator.manual_seed(seed)
                yield
        elif hasattr(self.policy, "fork_rng"):
            with self.policy.fork_rng(seed):
                yield
        else:
            yield

    def _play(self, task: Task, explore: bool) -> Trajectory:
        self.sync_weights()
        steps: list[Step] = []
        env_id = ""
        try:
            env = self._ensure_env()
            env_id = env.env_id
            # a self-hosted site due for its reset gets it here, between episodes
            instance_reset = env.reset_instance() if getattr(env, "instance_reset_due", lambda: False)() else None
            t0 = time.perf_counter()
            obs = env.reset(task)
            task.instruction = task.instruction or obs.task
            reset_s = time.perf_counter() - t0
            self.episode_steps = 0
            referee = self.referee.episode()

            def finish(outcome: str) -> Trajectory:
                ended = Trajectory(task, steps, outcome, env_id, self.runner_id, final_observation=obs)
                return referee.settle(ended)

            for _ in range(self.cfg.env.max_steps):
                obs.extras["previous_actions"] = [s.action_text for s in steps]
                t0 = time.perf_counter()
                sample = self.policy.act([obs], greedy=not explore)[0]
                t1 = time.perf_counter()
                result = env.step(sample.text)
                t2 = time.perf_counter()
                info = result.info
                steps.append(
                    Step(
                        observation=obs,
                        action_text=sample.text,
                        action=info.get("action"),
                        reward=result.reward,
                        done=result.done,
                        policy_version=sample.version,
                        logprob=sample.logprob,
                        timings={"act_s": t1 - t0, "env_s": t2 - t1, **({"reset_s": reset_s} if not steps else {})},
                        error=info.get("parse_error") or info.get("action_error"),
                        info={k: v for k, v in info.items() if k not in _STEP_FIELDS and v is not None}
                        | ({"prompt": sample.prompt} if sample.prompt else {}),
                        token_ids=sample.token_ids,
                    )
                )
                if instance_reset is not None and len(steps) == 1:
                    steps[0].info["instance_reset"] = instance_reset
                self.episode_steps = len(steps)
                obs = result.observation
                if referee.every_step and referee.after_step(task, steps, obs).success:
                    steps[-1].reward, steps[-1].done = 1.0, True
                    return finish("success")
                if result.done:
                    return finish(info.get("outcome", "failure"))
            return finish("timeout")
        except EnvBrokenError as e:
            self._drop_env()  # the next episode starts a fresh browser
            return Trajectory(task, steps, "env_error", env_id, self.runner_id, error=str(e))
        except LLMError as e:  # a hosted policy gave no answer: not the agent's failure, never trained on
            return Trajectory(task, steps, "env_error", env_id, self.runner_id, error=f"policy unavailable: {e}")

    def pids(self) -> dict:
        """Process ids of this runner's browser (or device bridge), for health checks."""
        env = self.env
        return env.pids() if env is not None else {}

    def status(self) -> dict:
        return {
            "runner_id": self.runner_id,
            "node": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "policy_version": self.policy.version,
            "episode_steps": self.episode_steps,
            "envs_created": self.envs_created,
        }

    def score(self, observation, action_text: str) -> float:
        """Log-probability of an action under this replica's current weights."""
        return float(self.policy.log_probs([observation], [action_text]).item())

    def close(self) -> None:
        self.closed = True
        self._drop_env()


RemoteEnvRunner = ray.remote(EnvRunner)
