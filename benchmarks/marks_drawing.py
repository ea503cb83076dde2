"""draw_marks against the implementation it replaced (with the PNG encoder of the time: the rows built in
one buffer, then zlib.compress), on real documentation pages: same PNG bytes, and how long each takes.

One `WebEnv` (1024x768, as web_real_pages.py builds it) resets on python's library/functions.html and
library/stdtypes.html and sqlite's lang.html (Debian's python3.11-doc and sqlite3-doc, see doc_sites.py);
each page's screenshot before the marks and its element list are kept. Each page is then timed at its own
element count and with its elements repeated, shifted at random by up to 30 px, up to 200 (the env's
max_elements): the median over --reps calls of each, old and new interleaved so that load on the
machine falls on both alike; the fastest call of each is given too.

    python benchmarks/marks_drawing.py --reps 30
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import struct
import time
import zlib
from pathlib import Path

import numpy as np
from doc_sites import SITES, serve
from PIL import Image, ImageDraw, ImageFont
from web_real_pages import make_env, timed_reset
from web_step_latency import machine

from rlsys.envs.web.marks import _COLORS, _PAD, _SEE_THROUGH, LABEL_FONT_SIZE, draw_marks
from rlsys.envs.web.png import PNG_LEVEL, _chunk

PAGES = (("python", "library/functions.html"), ("python", "library/stdtypes.html"), ("sqlite", "lang.html"))
MAX_ELEMENTS = 200
JITTER = 30
SETTLE_S = 3  # for the browser's processes to finish exiting before the timing starts


def capture_pages() -> list[tuple[str, bytes, list[dict]]]:
    """(page, screenshot without marks, elements) for each of PAGES."""
    roots = {site.name: site.root for site in SITES}
    env, captured = make_env(), []
    try:
        for site, path in PAGES:
            server, base_url = serve(roots[site])
            try:
                obs, _ = timed_reset(env, f"{base_url}/{path}")
                captured.append((path, env.browser.screenshot_png(), obs.extras["elements"]))
            finally:
                server.shutdown()
    finally:
        env.close()
    return captured


def more_elements(elements: list[dict], count: int, rng: random.Random) -> list[dict]:
    """`elements` followed by copies of them shifted at random, `count` in all."""
    extra = []
    while len(elements) + len(extra) < count:
        left, top, width, height = rng.choice(elements)["box"]
        moved = [left + rng.randint(-JITTER, JITTER), top + rng.randint(-JITTER, JITTER), width, height]
        extra.append({"box": moved})
    return elements + extra


def median_ms(calls: dict, reps: int) -> dict:
    times = {name: [] for name in calls}
    for _ in range(reps):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - t0) * 1000)
    return {name: (round(statistics.median(t), 1), round(min(t), 1)) for name, t in times.items()}


def compare(page: str, png: bytes, elements: list[dict], reps: int) -> dict:
    """Checks that both give the same PNG, then times them."""
    new = draw_marks(png, elements)
    if new != _reference_draw_marks(png, elements):
        raise SystemExit(f"{page} with {len(elements)} elements: draw_marks's PNG differs from the reference's")
    ms = median_ms(
        {"old": lambda: _reference_draw_marks(png, elements), "new": lambda: draw_marks(png, elements)}, reps
    )
    return {"page": page, "elements": len(elements), "png_bytes": len(new)} | {
        f"{name}_{stat}_ms": ms[name][i] for name in ms for i, stat in enumerate(("median", "min"))
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "marks_drawing.json"))
    args = p.parse_args()
    rng, results = random.Random(0), []
    pages = capture_pages()
    time.sleep(SETTLE_S)
    for page, png, elements in pages:
        for count in (len(elements), MAX_ELEMENTS):
            results.append(compare(page, png, more_elements(elements, count, rng), args.reps))
            r = results[-1]
            print(
                f"{page:24s} {count:4d} elements, median (fastest) ms:"
                f" old {r['old_median_ms']:5.1f} ({r['old_min_ms']:5.1f}),"
                f" new {r['new_median_ms']:5.1f} ({r['new_min_ms']:5.1f}), same bytes"
            )
    Path(args.out).write_text(json.dumps({"machine": machine(), "reps": args.reps, "results": results}, indent=1))
    print(f"wrote {args.out}")


# -- the implementation draw_marks replaced, unchanged but for its helpers' names -----------------------

_EDGE = 24


def _reference_draw_marks(png: bytes, elements: list[dict]) -> bytes:
    if not elements:
        return png
    with Image.open(io.BytesIO(png)) as im:
        image = im.convert("RGB")
    edges = _reference_edges(image)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=LABEL_FONT_SIZE)
    boxes = [tuple(element["box"]) for element in elements]
    for index, (left, top, width, height) in enumerate(boxes):
        draw.rectangle((left, top, left + width - 1, top + height - 1), outline=_COLORS[index % len(_COLORS)], width=2)
    digits = [font.getbbox(str(index)) for index in range(len(boxes))]
    sizes = [(x1 - x0 + 2 * _PAD, y1 - y0 + 2 * _PAD) for x0, y0, x1, y1 in digits]
    for index, ((x, y, w, h), covers) in enumerate(_reference_label_spots(boxes, sizes, edges)):
        color = _COLORS[index % len(_COLORS)]
        if covers:
            under = image.crop((x, y, x + w, y + h))
            image.paste(Image.blend(under, Image.new("RGB", under.size, color), _SEE_THROUGH), (x, y))
        else:
            draw.rectangle((x, y, x + w - 1, y + h - 1), fill=color)
        draw.text((x + _PAD - digits[index][0], y + _PAD - digits[index][1]), str(index), fill="white", font=font)
    return _reference_encode_png(image)


def _reference_label_spots(boxes: list[tuple], sizes: list[tuple], edges: np.ndarray) -> list[tuple[tuple, bool]]:
    image_height, image_width = edges.shape
    rects = np.asarray(boxes, dtype=np.int64).reshape(-1, 4)
    obstacles = np.concatenate([rects[:, :2], rects[:, :2] + rects[:, 2:]], axis=1)  # left, top, right, bottom
    spots = []
    for (left, top, width, height), (w, h) in zip(boxes, sizes):
        right, bottom = left + width, top + height
        candidates = [
            (left, top - h),
            (right - w, top - h),
            (right, top),
            (left - w, top),
            (left, bottom),
            (right - w, bottom),
            (right, bottom - h),
            (left - w, bottom - h),
            (left, top),
        ]
        fits = [(x, y) for x, y in candidates if 0 <= x <= image_width - w and 0 <= y <= image_height - h]
        if not fits:
            fits = [(max(0, min(left, image_width - w)), max(0, min(top, image_height - h)))]
        tags = np.asarray([(x, y, x + w, y + h) for x, y in fits])
        across = np.minimum(tags[:, None, 2], obstacles[:, 2]) - np.maximum(tags[:, None, 0], obstacles[:, 0])
        down = np.minimum(tags[:, None, 3], obstacles[:, 3]) - np.maximum(tags[:, None, 1], obstacles[:, 1])
        covered = (np.maximum(across, 0) * np.maximum(down, 0)).sum(axis=1)
        shown = [int(edges[max(y, 0) : y + h, max(x, 0) : x + w].sum()) for x, y in fits]
        best = min(range(len(fits)), key=lambda i: (covered[i], shown[i], i))
        spots.append(((*fits[best], w, h), bool(covered[best] > 0)))
        obstacles = np.concatenate([obstacles, tags[best : best + 1]])
    return spots


def _reference_encode_png(image: Image.Image) -> bytes:
    pixels = np.asarray(image)
    height, width, _ = pixels.shape
    rows = np.zeros((height, width * 3 + 1), np.uint8)
    rows[:, 1:] = pixels.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(rows, PNG_LEVEL)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _reference_edges(image: Image.Image) -> np.ndarray:
    gray = np.asarray(image.convert("L"), dtype=np.int16)
    edges = np.zeros(gray.shape, dtype=np.uint8)
    edges[:, 1:] |= np.abs(np.diff(gray, axis=1)) > _EDGE
    edges[1:, :] |= np.abs(np.diff(gray, axis=0)) > _EDGE
    return edges


if __name__ == "__main__":
    main()
