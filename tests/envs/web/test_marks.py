"""Set-of-marks drawing and the PNG encoder it uses, read back by Pillow (a decoder nobody here wrote)."""

import io

import numpy as np
from PIL import Image

from rlsys.envs.web.marks import draw_marks, encode_png


def decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def test_encoded_png_decodes_to_the_same_pixels():
    pixels = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)  # odd sizes, noise
    assert np.array_equal(decode(encode_png(Image.fromarray(pixels))), pixels)


def test_marks_outline_each_box_and_leave_the_rest():
    white = Image.new("RGB", (200, 100), "white")
    out = decode(draw_marks(encode_png(white), [{"box": [50, 40, 60, 30]}]))
    assert tuple(out[55, 50]) != (255, 255, 255)  # on the box's left edge
    assert tuple(out[55, 80]) == (255, 255, 255)  # inside the box: the page shows through
    assert tuple(out[90, 190]) == (255, 255, 255)  # far from it
