"""Set-of-marks: numbered boxes around the interactive elements, drawn onto the screenshot in
Python so the page itself is never modified."""

from __future__ import annotations

import io

from PIL import Image, ImageDraw, ImageFont

PNG_LEVEL = 6
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
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=PNG_LEVEL)
    return out.getvalue()
