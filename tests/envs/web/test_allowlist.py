"""The search engine's origin (Google by default) is allowed only while the config sets no allowlist: an
`env.allowed_origins` or `env.allowed_domains` the config sets is the whole list, never widened by a default."""

import pytest

from rlsys.envs.web.webenv import WebEnv, episode_policy
from tests.envs.web.test_env_web import pae, task, web_config

START = "http://127.0.0.1:7770/index.html"
GOOGLE = "https://www.google.com/search?q=rlsys"


@pytest.mark.parametrize(
    "allowlist, google",
    [
        ({}, True),  # no allowlist: as before, the search engine is reachable
        ({"allowed_origins": ["data:"]}, True),  # a scheme entry names no origin
        ({"allowed_origins": ["http://127.0.0.1:9000"]}, False),
        ({"allowed_domains": ["wikipedia.org"]}, False),
        ({"allowed_origins": ["https://www.google.com"]}, True),  # named by the allowlist itself
        ({"allowed_domains": ["google.com"]}, True),
    ],
)
def test_the_search_engine_is_reached_only_when_no_allowlist_leaves_it_out(tmp_path, allowlist, google):
    policy = episode_policy(web_config(tmp_path, **allowlist), START)
    assert policy.allows_url(START)
    assert policy.allows_url(GOOGLE) is google


def test_the_search_action_is_refused_under_an_allowlist_that_leaves_the_engine_out(tmp_path, site):
    """In Chromium: the task's site is allowed, the search engine (another origin of this machine) is not."""
    engine = site.replace("127.0.0.1", "localhost") + "/page2.html"
    env = WebEnv(web_config(tmp_path, action_space="pae", search_engine=engine, allowed_origins=[site]))
    try:
        env.reset(task(site))
        result = env.step(pae("Google"))
        assert result.info["blocked"] == [engine]
        assert result.observation.location == f"{site}/actions.html"
    finally:
        env.close()
