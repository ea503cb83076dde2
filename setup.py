"""Package discovery for the one namespace `rlsys`: the folders actors/, learners/ and envs/ sit beside
rlsys/ in the repository and install as rlsys.actors, rlsys.learners and rlsys.envs (pyproject.toml's
package-dir). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

MAPPED = ("actors", "learners", "envs")


def packages() -> list[str]:
    found = ["rlsys"] + [f"rlsys.{p}" for p in find_packages("rlsys")]
    for top in MAPPED:
        found += [f"rlsys.{top}"] + [f"rlsys.{top}.{p}" for p in find_packages(top)]
    return found


# the experiment files, resolvable by name (`--config quickstart`)
setup(packages=packages() + ["rlsys.configs"])
