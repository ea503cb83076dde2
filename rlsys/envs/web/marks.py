"""Set-of-marks: numbered boxes around the interactive elements, drawn onto the screenshot in
Python so the page itself is never modified."""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from rlsys.envs.web.png import decode_rgb, encode_png

LABEL_FONT_SIZE = 12
_PAD = 2  # pixels around a tag's digits
_SEE_THROUGH = 0.6  # how much of a tag's colour shows over what it covers, where it must cover something
_EDGE = 24  # a change in gray level this large between neighbouring pixels is something shown
_COLORS = ((230, 25, 75), (60, 120, 216), (0, 150, 80), (245, 130, 48), (145, 30, 180), (0, 128, 128))


def draw_marks(png: bytes, elements: list[dict]) -> bytes:
    """`png` with each element's box outlined and its index written on a small tag beside the box.

    A tag goes outside its box where it can, on a spot that covers no element's box and no other tag, so
    that it never hides the text of a small button; of those spots, on one where the page shows the least
    (no text, no edges). Only where every spot covers a box (a dense grid) does it go where it covers
    least, on a see-through tag."""
    if not elements:
        return png
    image = decode_rgb(png)
    gray = np.asarray(image.convert("L"))  # before the drawing: the page's own edges
    draw = ImageDraw.Draw(image)
    boxes = [tuple(element["box"]) for element in elements]
    for index, (left, top, width, height) in enumerate(boxes):
        draw.rectangle((left, top, left + width - 1, top + height - 1), outline=_COLORS[index % len(_COLORS)], width=2)
    tags = [_tag(index) for index in range(len(boxes))]
    for tag, ((x, y, w, h), covers) in zip(tags, label_spots(boxes, [tag.size for tag in tags], gray)):
        if tag.ink is not None and x + w <= image.width and y + h <= image.height:
            image.paste(_see_through(image.crop((x, y, x + w, y + h)), tag) if covers else tag.opaque, (x, y))
            continue
        if covers:
            under = image.crop((x, y, x + w, y + h))
            image.paste(Image.blend(under, Image.new("RGB", under.size, tag.color), _SEE_THROUGH), (x, y))
        else:
            draw.rectangle((x, y, x + w - 1, y + h - 1), fill=tag.color)
        draw.text((x + _PAD - tag.digits[0], y + _PAD - tag.digits[1]), tag.text, fill="white", font=_font())
    return encode_png(image)


class _Tag(NamedTuple):
    """A tag prerendered: where the text's ink stays inside the tag, drawing the tag is pasting it."""

    text: str
    color: tuple
    digits: tuple  # the text's bounding box when drawn at (0, 0)
    size: tuple  # the tag's width and height
    ink: Image.Image | None  # how much of each pixel of the tag the text covers; None if it spills out
    opaque: Image.Image  # the tag where it covers nothing: its colour, and its text in white


@functools.cache
def _font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=LABEL_FONT_SIZE)


@functools.cache
def _tag(index: int) -> _Tag:
    text, color, font = str(index), _COLORS[index % len(_COLORS)], _font()
    digits = font.getbbox(text)
    size = (digits[2] - digits[0] + 2 * _PAD, digits[3] - digits[1] + 2 * _PAD)
    opaque = Image.new("RGB", size, color)
    ImageDraw.Draw(opaque).text((_PAD - digits[0], _PAD - digits[1]), text, fill="white", font=font)
    # the text's coverage, on a canvas with room around the tag to see whether any of it falls outside
    margin = sum(size)
    canvas = Image.new("L", (size[0] + 2 * margin, size[1] + 2 * margin))
    ImageDraw.Draw(canvas).text((margin + _PAD - digits[0], margin + _PAD - digits[1]), text, fill=255, font=font)
    tag_area, ink = (margin, margin, margin + size[0], margin + size[1]), canvas.getbbox()
    inside = ink is None or _within(ink, tag_area)
    return _Tag(text, color, digits, size, canvas.crop(tag_area) if inside else None, opaque)


def _within(inner: tuple, outer: tuple) -> bool:
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def _see_through(under: Image.Image, tag: _Tag) -> Image.Image:
    """The tag over `under`, its colour blended with what it covers and its text on top."""
    tagged = Image.blend(under, Image.new("RGB", under.size, tag.color), _SEE_THROUGH)
    tagged.paste((255, 255, 255), (0, 0), tag.ink)  # the same blend of white as drawing the text
    return tagged


# The spots tried around a box, in order. A spot's left is the box's left, plus the box's width where the
# first column says so, less the tag's width where the second does; its top likewise with the last two.
_SPOTS = np.array(
    [
        (0, 0, 0, 1),  # above, at its left end
        (1, 1, 0, 1),  # above, at its right end
        (1, 0, 0, 0),  # right of it, at the top
        (0, 1, 0, 0),  # left of it, at the top
        (0, 0, 1, 0),  # below, at its left end
        (1, 1, 1, 0),  # below, at its right end
        (1, 0, 1, 1),  # right of it, at the bottom
        (0, 1, 1, 1),  # left of it, at the bottom
        (0, 0, 0, 0),  # in its top left corner
    ]
)


def label_spots(boxes: list[tuple], sizes: list[tuple], gray: np.ndarray) -> list[tuple[tuple, bool]]:
    """Where each element's tag goes, (left, top, width, height), and whether it covers a box or another tag.

    Of the spots around the box that lie in the image, the one covering the least area of the boxes and of
    the tags placed before it, then the fewest edge pixels of `gray` (the image in gray levels; see
    `_edge_counts`), then the first in the order of `_SPOTS`."""
    rects = np.asarray(boxes, dtype=np.int64).reshape(-1, 4)
    spots, fits = _candidate_spots(rects, np.asarray(sizes, dtype=np.int64).reshape(-1, 2), gray.shape)
    shown = _edge_counts(spots, fits, gray)
    # one number per spot ordered as (covered, shown, spot order); a spot outside the image never wins
    scale = len(_SPOTS) * (int(shown.max(initial=0)) + 1)
    tie_breaks = np.where(fits, shown * len(_SPOTS) + np.arange(len(_SPOTS)), np.iinfo(np.int64).max // 2)
    # the boxes, then room for the tags as they are placed, each as left, top, right, bottom
    obstacles = np.concatenate([rects[:, :2], rects[:, :2] + rects[:, 2:]], axis=1)
    obstacles = np.concatenate([obstacles, np.zeros_like(obstacles)])
    placed = []
    for index, near in enumerate(_obstacles_near(spots, fits, obstacles[: len(rects)])):
        covered = _overlap_areas(spots[index], obstacles[near])
        best = int((covered * scale + tie_breaks[index]).argmin())
        spot = spots[index, best]
        obstacles[len(rects) + index] = spot
        left, top, right, bottom = spot.tolist()
        placed.append(((left, top, right - left, bottom - top), bool(covered[best])))
    return placed


def _candidate_spots(rects: np.ndarray, sizes: np.ndarray, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Each box's spots (see `_SPOTS`) as (boxes, spots, 4) left, top, right, bottom, and which lie in the
    image. A box none of whose spots does (a tag larger than the image) gets one: its first, moved in."""
    image_height, image_width = shape
    left, top, w, h = rects[:, :1], rects[:, 1:2], sizes[:, :1], sizes[:, 1:]
    x = left + _SPOTS[:, 0] * rects[:, 2:3] - _SPOTS[:, 1] * w
    y = top + _SPOTS[:, 2] * rects[:, 3:4] - _SPOTS[:, 3] * h
    fits = (x >= 0) & (x <= image_width - w) & (y >= 0) & (y <= image_height - h)
    lost = ~fits.any(axis=1)
    x[lost, 0] = np.maximum(0, np.minimum(left[lost, 0], image_width - w[lost, 0]))
    y[lost, 0] = np.maximum(0, np.minimum(top[lost, 0], image_height - h[lost, 0]))
    fits[lost, 0] = True
    return np.stack([x, y, x + w, y + h], axis=-1), fits


def _overlap_areas(rects: np.ndarray, others: np.ndarray) -> np.ndarray:
    """For each of `rects` (left, top, right, bottom), the sum of the areas it shares with each of `others`."""
    sides = np.minimum(rects[:, None, 2:], others[:, 2:]) - np.maximum(rects[:, None, :2], others[:, :2])
    np.maximum(sides, 0, out=sides)
    # ufuncs, not .prod and .sum: this runs once per box, and their Python wrappers cost as much as the sums
    return np.add.reduce(sides[..., 0] * sides[..., 1], axis=1)


def _edge_counts(spots: np.ndarray, fits: np.ndarray, gray: np.ndarray) -> np.ndarray:
    """The number of edge pixels under each fit spot, 0 for the others. An edge pixel's gray level differs by
    more than `_EDGE` from the pixel left of it or the one above it.

    Only the spots are looked at, not the whole image: each spot's pixels, with the row above and the column
    left of them, gathered as one window the size of the largest tag, the part outside the spot masked. A
    spot that passes the image's edge (a tag larger than the image) is its box's only fit one, so what is
    counted past the edge decides nothing."""
    image_height, image_width = gray.shape
    spots = spots[fits]
    sizes = spots[:, 2:] - spots[:, :2]
    width, height = int(sizes[:, 0].max(initial=0)), int(sizes[:, 1].max(initial=0))
    # a row above and a column left that repeat the image's first, so that no edge is seen at its border,
    # and room below and right for a spot that passes the image's edge
    padded = np.zeros((image_height + 1 + height, image_width + 1 + width), dtype=np.uint8)
    padded[1 : image_height + 1, 1 : image_width + 1] = gray
    padded[0, 1 : image_width + 1], padded[1 : image_height + 1, 0] = gray[0], gray[:, 0]
    windows = np.lib.stride_tricks.sliding_window_view(padded, (height + 1, width + 1))[spots[:, 1], spots[:, 0]]
    pixels = windows[:, 1:, 1:]
    edges = _differ(pixels, windows[:, 1:, :-1]) | _differ(pixels, windows[:, :-1, 1:])
    in_spot = (np.arange(height)[:, None] < sizes[:, 1, None, None]) & (np.arange(width) < sizes[:, 0, None, None])
    counts = np.zeros(fits.shape, dtype=np.int64)
    counts[fits] = np.count_nonzero(edges & in_spot, axis=(1, 2))
    return counts


def _obstacles_near(spots: np.ndarray, fits: np.ndarray, boxes: np.ndarray) -> list[np.ndarray]:
    """For each box, the indices into boxes-then-tags of those that may overlap one of its fit spots: the
    boxes, and the tags of earlier boxes, that meet the hull of its fit spots (a tag is on a fit spot)."""
    hulls = np.concatenate(
        [
            np.where(fits[..., None], spots[..., :2], np.iinfo(np.int64).max).min(axis=1),
            np.where(fits[..., None], spots[..., 2:], np.iinfo(np.int64).min).max(axis=1),
        ],
        axis=1,
    )
    near_boxes, near_tags = _meet(hulls, boxes), np.tril(_meet(hulls, hulls), k=-1)
    return [np.flatnonzero(row) for row in np.concatenate([near_boxes, near_tags], axis=1)]


def _meet(rects: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Whether each of `rects` shares some area with each of `others` (all as left, top, right, bottom)."""
    return (
        (rects[:, None, 0] < others[:, 2])
        & (others[:, 0] < rects[:, None, 2])
        & (rects[:, None, 1] < others[:, 3])
        & (others[:, 1] < rects[:, None, 3])
    )


def _differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b) - np.minimum(a, b) > _EDGE  # |a - b| without leaving uint8
