"""Whether a model key's value is a local path or a Hugging Face Hub id (`org/name`): a check of the string alone.
Finding the files an id stands for (the Hugging Face cache, a download) is the policies' part
(rlsys/policies/hub.py).

A value is a path when it is not a string, starts with `/`, `./`, `../` or `~`, or exists; otherwise it is a
Hub id when it is spelled like one.
"""

from __future__ import annotations

import os
from pathlib import Path

PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\")


def is_hub_id(value: str | os.PathLike | None) -> bool:
    """Whether `value` names a model on the Hugging Face Hub rather than a local path."""
    if not isinstance(value, str) or not value or value.startswith(PATH_PREFIXES) or value in (".", ".."):
        return False
    if Path(value).exists():
        return False
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(value)
    except ValueError:
        return False
    return True
