"""The env relaunches its browser before an episode after N episodes or past a memory cap, and the old
browser's processes are gone."""

import psutil

from rlsys.envs.tasks import miniwob_task
from rlsys.envs.web.miniwob import MiniWoBEnv
from tests.conftest import make_config


def chromium_pids(env) -> set[int]:
    return set(env.pids()["chromium"])


def all_gone(pids: set[int]) -> bool:
    return not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)


def test_browser_is_relaunched_after_max_episodes(tmp_path):
    env = MiniWoBEnv(make_config(tmp_path, env__browser_max_episodes=2).env, "recycle")
    try:
        first = [env.reset(miniwob_task("click-test-2", seed, "train")) for seed in (1, 2)]
        old = chromium_pids(env)
        assert old and not any("browser_relaunched" in obs.extras for obs in first)
        third = env.reset(miniwob_task("click-test-2", 3, "train"))
        assert "browser_max_episodes=2" in third.extras["browser_relaunched"]
        assert chromium_pids(env).isdisjoint(old) and all_gone(old)
        assert env.browser_relaunches == 1
        result = env.step(f"click [{next(i for i, e in enumerate(third.extras['elements']) if e['text'] == 'ONE')}]")
        assert result.done and result.reward == 1.0  # the new browser plays the episode
    finally:
        env.close()


def test_browser_is_relaunched_past_its_memory_cap(tmp_path):
    env = MiniWoBEnv(make_config(tmp_path, env__browser_memory_mb=1).env, "recycle")
    env.memory_check_every = 2
    try:
        env.reset(miniwob_task("click-test-2", 1, "train"))
        env.reset(miniwob_task("click-tab", 1, "train"))
        old = chromium_pids(env)
        assert env.browser.memory_mb() > 1
        obs = env.reset(miniwob_task("click-test-2", 2, "train"))
        assert "over env.browser_memory_mb=1" in obs.extras["browser_relaunched"]
        assert chromium_pids(env).isdisjoint(old) and all_gone(old)
    finally:
        env.close()
