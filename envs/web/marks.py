"""Set-of-marks: numbered boxes around the interactive elements, drawn onto the screenshot in
Python so the page itself is never modified."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image, ImageDraw, ImageFont

PNG_LEVEL = 1
_COLORS = ((230, 25, 75), (60, 120, 216), (0, 150, 80), (245, 130, 48), (145, 30, 180), (0, 128, 128))


def draw_marks(png: bytes, elements: list[dict]) -> bytes:
    """`png` with each element's box outlined and its index written at its top-left corner."""
    if not elements:
        return png
    with Image.open(io.BytesIO(png)) as im:
        image = im.convert("RGB")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=12)
    for index, element in enumerate(elements):
        left, top, width, height = element["box"]
        color = _COLORS[index % len(_COLORS)]
        draw.rectangle((left, top, left + width - 1, top + height - 1), outline=color, width=2)
        label = str(index)
        x0, y0, x1, y1 = draw.textbbox((left, top), label, font=font)
        label_top = max(0, top - (y1 - y0) - 2)  # above the box, unless the box touches the top
        draw.rectangle((left, label_top, left + (x1 - x0) + 4, label_top + (y1 - y0) + 2), fill=color)
        draw.text((left + 2, label_top - (y0 - top)), label, fill=(255, 255, 255), font=font)
    return encode_png(image)


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
