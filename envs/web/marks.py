"""Set-of-marks: numbered boxes around the interactive elements, drawn onto the screenshot in
Python so the page itself is never modified."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image, ImageDraw, ImageFont

PNG_LEVEL = 1
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
    with Image.open(io.BytesIO(png)) as im:
        image = im.convert("RGB")
    edges = _edges(image)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=LABEL_FONT_SIZE)
    boxes = [tuple(element["box"]) for element in elements]
    for index, (left, top, width, height) in enumerate(boxes):
        draw.rectangle((left, top, left + width - 1, top + height - 1), outline=_COLORS[index % len(_COLORS)], width=2)
    digits = [font.getbbox(str(index)) for index in range(len(boxes))]
    sizes = [(x1 - x0 + 2 * _PAD, y1 - y0 + 2 * _PAD) for x0, y0, x1, y1 in digits]
    for index, ((x, y, w, h), covers) in enumerate(label_spots(boxes, sizes, edges)):
        color = _COLORS[index % len(_COLORS)]
        if covers:
            under = image.crop((x, y, x + w, y + h))
            image.paste(Image.blend(under, Image.new("RGB", under.size, color), _SEE_THROUGH), (x, y))
        else:
            draw.rectangle((x, y, x + w - 1, y + h - 1), fill=color)
        draw.text((x + _PAD - digits[index][0], y + _PAD - digits[index][1]), str(index), fill="white", font=font)
    return encode_png(image)


def label_spots(boxes: list[tuple], sizes: list[tuple], edges: np.ndarray) -> list[tuple[tuple, bool]]:
    """Where each element's tag goes, (left, top, width, height), and whether it covers a box or another tag.

    Of the spots around the box that lie in the image, the one covering the least area of the boxes and of
    the tags placed before it, then the fewest pixels of `edges` (the image's, see `_edges`), then the
    first in the order below."""
    image_height, image_width = edges.shape
    rects = np.asarray(boxes, dtype=np.int64).reshape(-1, 4)
    obstacles = np.concatenate([rects[:, :2], rects[:, :2] + rects[:, 2:]], axis=1)  # left, top, right, bottom
    spots = []
    for (left, top, width, height), (w, h) in zip(boxes, sizes):
        right, bottom = left + width, top + height
        candidates = [
            (left, top - h),  # above, at its left end
            (right - w, top - h),  # above, at its right end
            (right, top),  # right of it, at the top
            (left - w, top),  # left of it, at the top
            (left, bottom),  # below, at its left end
            (right - w, bottom),  # below, at its right end
            (right, bottom - h),  # right of it, at the bottom
            (left - w, bottom - h),  # left of it, at the bottom
            (left, top),  # in its top left corner
        ]
        fits = [(x, y) for x, y in candidates if 0 <= x <= image_width - w and 0 <= y <= image_height - h]
        if not fits:  # a tag larger than the image
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


def _edges(image: Image.Image) -> np.ndarray:
    """1 where the image changes (text, lines) from the pixel left of it or above it, else 0."""
    gray = np.asarray(image.convert("L"), dtype=np.int16)
    edges = np.zeros(gray.shape, dtype=np.uint8)
    edges[:, 1:] |= np.abs(np.diff(gray, axis=1)) > _EDGE
    edges[1:, :] |= np.abs(np.diff(gray, axis=0)) > _EDGE
    return edges


def encode_png(image: Image.Image) -> bytes:
    """An RGB image as PNG with unfiltered rows at zlib level 1.

    Written by hand because Pillow filters every row adaptively: on 1024x768 screenshots of text pages that
    took 90-110 ms and gave larger files (185-195 KB) than no filter at level 1 (18 ms, 160 KB), and this runs
    on every step."""
    pixels = np.asarray(image.convert("RGB"))
    height, width, _ = pixels.shape
    rows = np.zeros((height, width * 3 + 1), np.uint8)  # each row starts with its filter type: 0, none
    rows[:, 1:] = pixels.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    pixel_data = zlib.compress(rows, PNG_LEVEL)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", pixel_data) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
