"""Prompt templates: the task proposer's live here; policies and judges keep theirs beside them.
`read_template` is how all of them are found: a packaged name, or a user's `.txt` file."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Traversable


def read_template(name: str, folder: Traversable, known: Iterable[str], key: str) -> str:
    """The template `name` from the package folder `folder`, or the file `name` when it ends in `.txt`;
    errors name the config key."""
    if name.endswith(".txt"):
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"{key}: template file {name!r} not found")
        return path.read_text()
    known = tuple(known)
    if name not in known:
        raise ValueError(f"{key}: unknown template {name!r}; expected one of {known} or a .txt file")
    return folder.joinpath(f"{name}.txt").read_text()


def packaged(package: str, subfolder: str = "") -> Traversable:
    folder = resources.files(package)
    return folder.joinpath(subfolder) if subfolder else folder
