"""PNG decoding and encoding for the screenshots the web env draws its marks on: both by hand, for speed on
every step, and falling back to Pillow for any PNG not of the kind Chromium sends."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image

PNG_LEVEL = 1


def decode_rgb(png: bytes) -> Image.Image:
    """The PNG's pixels as Pillow's `convert("RGB")` gives them; twice as fast for what Chromium sends
    (8-bit RGB, each row filtered by the one above it), whose filter is undone by adding the rows up."""
    pixels = _unfiltered_rgb(png)
    if pixels is None:
        with Image.open(io.BytesIO(png)) as im:
            return im.convert("RGB")
    return Image.frombuffer("RGB", (pixels.shape[1] // 3, pixels.shape[0]), pixels, "raw", "RGB", 0, 1)


def _unfiltered_rgb(png: bytes) -> np.ndarray | None:
    """The pixel rows of an 8-bit, non-interlaced RGB PNG whose rows have filter 0 (none) or 2 (up) only;
    None for any other PNG."""
    chunks = _chunks(png)
    if chunks is None or [len(data) for data in chunks.get(b"IHDR", [])] != [13] or b"IDAT" not in chunks:
        return None
    width, height, *kind = struct.unpack(">IIBBBBB", chunks[b"IHDR"][0])
    if kind != [8, 2, 0, 0, 0] or not width or not height:
        return None
    size = height * (3 * width + 1)
    try:
        data = zlib.decompress(b"".join(chunks[b"IDAT"]), bufsize=size)  # one buffer, not blocks joined after
    except zlib.error:
        return None
    if len(data) != size:
        return None
    rows = np.frombuffer(data, dtype=np.uint8).reshape(height, 3 * width + 1)
    filters = rows[:, 0]
    if not np.all((filters == 0) | (filters == 2)):
        return None
    pixels = np.empty((height, 3 * width), dtype=np.uint8)
    pixels[0] = rows[0, 1:]  # the row above the first is taken to be zeros
    for up, above, unfiltered, filtered in zip(filters[1:].tolist(), pixels, pixels[1:], rows[1:, 1:]):
        if up:
            np.add(above, filtered, out=unfiltered)  # uint8 sums wrap around as the filter's do
        else:
            unfiltered[:] = filtered
    return pixels


def _chunks(png: bytes) -> dict[bytes, list[bytes]] | None:
    """The PNG's chunks' data by chunk type, up to IEND; None where it is not a complete PNG."""
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        return None
    chunks, at = {}, 8
    while at + 12 <= len(png):
        length, kind = struct.unpack(">I4s", png[at : at + 8])
        chunks.setdefault(kind, []).append(png[at + 8 : at + 8 + length])
        if kind == b"IEND":
            return chunks
        at += 12 + length
    return None


def encode_png(image: Image.Image) -> bytes:
    """An RGB image as PNG with unfiltered rows at zlib level 1.

    Written by hand because Pillow filters every row adaptively: on 1024x768 screenshots of text pages that
    took 90-110 ms and gave larger files (185-195 KB) than no filter at level 1 (18 ms, 160 KB), and this runs
    on every step."""
    image = image if image.mode == "RGB" else image.convert("RGB")
    width, height = image.size
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    idat = _deflated_rows(image)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _deflated_rows(image: Image.Image) -> bytes:
    """The image's rows, each led by its filter type (0, none), compressed at PNG_LEVEL: the same bytes as
    `zlib.compress` of them, without building them in a copy of their own.

    Pillow writes the rows one byte apart, that byte zero, so each row's zero is the next row's filter type;
    the first row's is fed first and the last row's dropped. zlib's output does not depend on how its input
    is split between calls when none of them flushes."""
    stride = 3 * image.width + 1
    padded_rows = image.tobytes("raw", "RGB", stride)
    if not padded_rows:  # no pixels, so no rows either
        return zlib.compress(b"", PNG_LEVEL)
    compressor = zlib.compressobj(PNG_LEVEL)
    return compressor.compress(b"\0") + compressor.compress(memoryview(padded_rows)[:-1]) + compressor.flush()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
