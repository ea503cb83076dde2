"""How ui_text lists a page's elements (`env.element_list`), shared by every env that shows web elements: the
browser envs and the synthetic one (envs/synthweb.py), which must not need a browser to import."""

from __future__ import annotations


def render_pae(index: int, element: dict) -> str:
    """PAE's element line: `[3]: <a> "Downloads";`."""
    return f'[{index}]: <{element["tag"]}> "{element["text"]}";'


def render_roles(index: int, element: dict) -> str:
    """An element as assistive technology announces it: `[3] checkbox "Remember me" checked`."""
    line = f'[{index}] {element.get("role") or element["tag"]} "{element.get("name", element["text"])}"'
    if element.get("value"):
        line += f' value "{element["value"]}"'
    if element.get("checked") is not None:
        line += " checked" if element["checked"] else " unchecked"
    if element.get("disabled"):
        line += " disabled"
    return line
