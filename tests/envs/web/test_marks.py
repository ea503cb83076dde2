"""Set-of-marks drawing and the PNG encoder it uses, read back by Pillow (a decoder nobody here wrote), on
made-up images and on screenshots Chromium took."""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from rlsys.envs.web.marks import _COLORS, _EDGE, _PAD, _SEE_THROUGH, LABEL_FONT_SIZE, draw_marks
from rlsys.envs.web.png import PNG_LEVEL, _chunk, _unfiltered_rgb, decode_rgb, encode_png
from rlsys.envs.web.webenv import WebEnv
from tests.envs.web.test_env_web import task, web_config


def decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def plain_encode_png(image: Image.Image) -> bytes:
    """The PNG the web env has always written, built the plain way: each row led by its filter type (0,
    none), all of them in one buffer compressed in one call. The learner's images must not change."""
    pixels = np.asarray(image.convert("RGB"))
    height, width, _ = pixels.shape
    rows = np.zeros((height, width * 3 + 1), np.uint8)
    rows[:, 1:] = pixels.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(rows.tobytes(), PNG_LEVEL)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


@pytest.mark.parametrize("size", [(37, 53), (1, 1), (768, 1024)])  # odd sizes, one pixel, a screenshot's
def test_encoded_png_decodes_to_the_same_pixels_and_bytes_as_ever(size):
    pixels = np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8)
    pixels[: size[0] // 2] //= 64  # runs for zlib to find too, not noise alone
    png = encode_png(Image.fromarray(pixels))
    assert np.array_equal(decode(png), pixels)
    assert png == plain_encode_png(Image.fromarray(pixels))


def test_marks_outline_each_box_and_leave_the_rest():
    white = Image.new("RGB", (200, 100), "white")
    out = decode(draw_marks(encode_png(white), [{"box": [50, 40, 60, 30]}]))
    assert tuple(out[55, 50]) != (255, 255, 255)  # on the box's left edge
    assert tuple(out[55, 80]) == (255, 255, 255)  # inside the box: the page shows through
    assert tuple(out[90, 190]) == (255, 255, 255)  # far from it


# -- draw_marks against a plain, slow implementation of what its docstring says ------------------------

FONT = ImageFont.load_default(size=LABEL_FONT_SIZE)


def plain_draw_marks(png: bytes, elements: list[dict]) -> bytes:
    image = decode_image(png)
    gray = np.asarray(image.convert("L"), dtype=int)
    edges = np.zeros(gray.shape, dtype=int)
    edges[:, 1:] |= np.abs(np.diff(gray, axis=1)) > _EDGE
    edges[1:, :] |= np.abs(np.diff(gray, axis=0)) > _EDGE
    draw = ImageDraw.Draw(image)
    boxes = [tuple(element["box"]) for element in elements]
    for index, (left, top, width, height) in enumerate(boxes):
        draw.rectangle((left, top, left + width - 1, top + height - 1), outline=_COLORS[index % len(_COLORS)], width=2)
    obstacles = [(left, top, left + width, top + height) for left, top, width, height in boxes]
    for index, box in enumerate(boxes):
        x0, y0, x1, y1 = FONT.getbbox(str(index))
        w, h = x1 - x0 + 2 * _PAD, y1 - y0 + 2 * _PAD
        x, y, covered = plain_spot(box, (w, h), obstacles, edges)
        obstacles.append((x, y, x + w, y + h))
        color = _COLORS[index % len(_COLORS)]
        if covered:
            under = image.crop((x, y, x + w, y + h))
            image.paste(Image.blend(under, Image.new("RGB", under.size, color), _SEE_THROUGH), (x, y))
        else:
            draw.rectangle((x, y, x + w - 1, y + h - 1), fill=color)
        draw.text((x + _PAD - x0, y + _PAD - y0), str(index), fill="white", font=FONT)
    return plain_encode_png(image)


def plain_spot(box: tuple, size: tuple, obstacles: list[tuple], edges: np.ndarray) -> tuple[int, int, int]:
    """The tag's left and top, and the area of boxes and tags it covers."""
    (left, top, width, height), (w, h) = box, size
    right, bottom = left + width, top + height
    xs = {"left": left, "right": right, "left-w": left - w, "right-w": right - w}
    ys = {"top": top, "bottom": bottom, "top-h": top - h, "bottom-h": bottom - h}
    order = [("left", "top-h"), ("right-w", "top-h"), ("right", "top"), ("left-w", "top"), ("left", "bottom")]
    order += [("right-w", "bottom"), ("right", "bottom-h"), ("left-w", "bottom-h"), ("left", "top")]
    image_height, image_width = edges.shape
    spots = [(xs[x], ys[y]) for x, y in order]
    spots = [(x, y) for x, y in spots if 0 <= x and x + w <= image_width and 0 <= y and y + h <= image_height]
    if not spots:
        spots = [(max(0, min(left, image_width - w)), max(0, min(top, image_height - h)))]
    scored = []
    for order_index, (x, y) in enumerate(spots):
        covered = sum(overlap((x, y, x + w, y + h), other) for other in obstacles)
        shown = sum(
            edges[row, col] for row in range(y, min(y + h, image_height)) for col in range(x, min(x + w, image_width))
        )
        scored.append((covered, shown, order_index, x, y))
    covered, _, _, x, y = min(scored)
    return x, y, covered


def overlap(a: tuple, b: tuple) -> int:
    return max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))


def decode_image(png: bytes) -> Image.Image:
    with Image.open(io.BytesIO(png)) as im:
        return im.convert("RGB")


def page_like(width: int, height: int, seed: int) -> np.ndarray:
    """White with blocks of noise standing in for text, flat coloured areas, and a band whose gray
    level steps by just under and just over what counts as an edge."""
    rng = np.random.default_rng(seed)
    pixels = np.full((height, width, 3), 255, dtype=np.uint8)
    for _ in range(6):
        x, y = rng.integers(0, width), rng.integers(0, height)
        pixels[y : y + rng.integers(3, 40), x : x + rng.integers(5, 120)] = rng.integers(0, 256, 3)
    for _ in range(8):
        x, y = rng.integers(0, width), rng.integers(0, height)
        block = pixels[y : y + 9, x : x + rng.integers(10, 90)]
        block[...] = rng.integers(0, 2, block.shape[:2])[..., None] * 200
    steps = np.arange(width) % 2 * (_EDGE + np.arange(width) // (width // 2))  # gray steps of _EDGE, _EDGE + 1
    pixels[height // 3 : height // 3 + 20] = 100 + steps[:, None]
    return pixels


def up_filtered_png(pixels: np.ndarray) -> bytes:
    """A PNG whose rows are each filtered by the row above (filter 2), as Chromium writes screenshots."""
    height, width, _ = pixels.shape
    flat = pixels.reshape(height, -1)
    rows = np.zeros((height, flat.shape[1] + 1), np.uint8)
    rows[:, 0] = 2
    rows[:, 1:] = flat - np.concatenate([np.zeros_like(flat[:1]), flat[:-1]])  # wraps around, as it should
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    ihdr, idat, iend = (_chunk(b"IHDR", header), _chunk(b"IDAT", zlib.compress(rows.tobytes())), _chunk(b"IEND", b""))
    return b"\x89PNG\r\n\x1a\n" + ihdr + idat + iend


def pillow_png(pixels: np.ndarray, mode: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, "PNG")  # adaptive filters; RGBA and palette too
    return out.getvalue()


def random_boxes(width: int, height: int, count: int, seed: int) -> list[dict]:
    """Boxes anywhere, some past the image's edges, some overlapping, some tiny."""
    rng = np.random.default_rng(seed)
    boxes = []
    for _ in range(count):
        w, h = int(rng.integers(1, 80)), int(rng.integers(1, 30))
        boxes.append({"box": [int(rng.integers(-20, width)), int(rng.integers(-10, height)), w, h]})
    boxes += [{"box": [0, 0, width, height]}, {"box": [width - 3, height - 3, 10, 10]}]
    return boxes


@pytest.mark.parametrize(
    "width, height, count, encoding",
    [
        (200, 120, 12, "up"),
        (320, 240, 150, "up"),  # more than 100: three-digit tags, and the spots run out
        (300, 200, 40, "none"),
        (240, 160, 30, "RGB"),
        (240, 160, 30, "RGBA"),
        (240, 160, 30, "P"),
        (30, 12, 5, "up"),  # smaller than a tag
    ],
)
def test_draw_marks_matches_a_plain_implementation(width, height, count, encoding):
    pixels = page_like(width, height, seed=count)
    if encoding == "up":
        png = up_filtered_png(pixels)
    elif encoding == "none":
        png = encode_png(Image.fromarray(pixels))
    else:
        png = pillow_png(pixels, encoding)
    elements = random_boxes(width, height, count, seed=width)
    assert draw_marks(png, elements) == plain_draw_marks(png, elements)


@pytest.mark.parametrize("encoding", ["up", "none", "RGBA", "P"])
def test_screenshots_decode_as_pillow_decodes_them(encoding):
    pixels = np.random.default_rng(1).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    if encoding == "up":
        png = up_filtered_png(pixels)
        assert np.array_equal(decode(png), pixels)  # the test's own encoder is right
    elif encoding == "none":
        png = encode_png(Image.fromarray(pixels))
    else:
        png = pillow_png(pixels, encoding)
    assert np.array_equal(np.asarray(decode_rgb(png)), decode(png))


# -- on screenshots Chromium took --------------------------------------------------------------------------

# text in several sizes and colours over a gradient: rows that differ from the ones above in every way
RICH_CONTENT = """
const block = document.createElement("div");
block.style = "position:absolute; left:0; top:330px; width:1024px; height:440px; font:13px serif;"
    + "background:linear-gradient(100deg, #fff 0%, #fc0 40%, #036 100%); color:#123";
for (let i = 0; i < 60; i++) {
  const line = document.createElement("span");
  line.style = `font-size:${9 + i % 12}px; color:hsl(${i * 37}, 70%, ${20 + i % 50}%)`;
  line.textContent = `Line ${i}: the quick brown fox jumps over the lazy dog, ${"=".repeat(i % 9)} `;
  block.appendChild(line);
}
document.body.appendChild(block);
"""


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory, site):
    """(PNG, elements) for two test pages as the web env sees them: one as served, one with text and colour
    added, both taken by Chromium at the env's 1024x768."""
    env = WebEnv(web_config(tmp_path_factory.mktemp("web"), action_space="pae"))
    try:
        taken = []
        for page in ("elements.html", "actions.html"):
            obs = env.reset(task(site, page))
            if page == "actions.html":
                env.driver.execute_script(RICH_CONTENT)
            taken.append((env.browser.screenshot_png(), obs.extras["elements"]))
        return taken
    finally:
        env.close()


def test_chromium_screenshots_decode_on_the_fast_path_as_pillow_decodes_them(screenshots):
    for png, _ in screenshots:
        assert _unfiltered_rgb(png) is not None, "Chromium's PNG is no longer of the kind the fast path reads"
        assert np.array_equal(np.asarray(decode_rgb(png)), decode(png))


def test_draw_marks_on_chromium_screenshots_matches_a_plain_implementation(screenshots):
    for png, elements in screenshots:
        assert len(elements) >= 5
        height, width, _ = decode(png).shape
        for boxes in (elements, elements + random_boxes(width, height, 200 - len(elements), seed=len(elements))):
            assert draw_marks(png, boxes) == plain_draw_marks(png, boxes)
