"""Draw the sample manga pages in this folder (for `make demo` and the OCR tests).

The PNGs and `pages.json` are committed: the demo and the tests never run
this script. It is here so the pages can be regenerated or changed:

    apt-get install fonts-noto-cjk        # Debian; the font the pages are drawn with
    .venv/bin/python examples/sample_manga/make_sample_pages.py

Font: Noto Sans CJK JP Regular (`NotoSansCJK-Regular.ttc`, face 0, from
Debian's fonts-noto-cjk 1:20220127), SIL Open Font License. Vertical text
uses Pillow's raqm layout (`direction="ttb"` with the `vert` feature), so
ー and ！ take their vertical forms as in a printed manga.

Each page follows manga conventions: panels read right to left, top to
bottom; Japanese bubbles are vertical columns read right to left; English
bubbles and captions are horizontal. `pages.json` lists, per page, the
phrases in that reading order: what the OCR analyzer must read back; and,
under `not_text`, what is drawn but is not text to read (furigana, a sound
effect). 005 has a tall panel beside two stacked ones, two bubbles in one
panel, furigana and a sound effect; 006 is a left-to-right (English) page.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont, features

FONT_FILE = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
BOLD_FONT_FILE = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc")
"""Sound effects are lettered bold."""
FONT_INDEX = 0  # the JP face of the collection
FONT_NAME = "Noto Sans CJK JP Regular (fonts-noto-cjk, NotoSansCJK-Regular.ttc face 0)"
PAGE_SIZE = (600, 850)
OUT_DIR = Path(__file__).resolve().parent

Box = tuple[int, int, int, int]


@dataclass
class Bubble:
    """Text centred at `center`: vertical columns (right to left) or horizontal lines."""

    center: tuple[int, int]
    lines: list[str]
    vertical: bool
    size: int = 30
    caption: bool = False  # a rectangular caption box instead of an oval balloon
    ruby: list[Ruby] = field(default_factory=list)

    def phrase(self) -> str:
        joiner = "" if self.vertical else " "
        return joiner.join(self.lines)


@dataclass
class Ruby:
    """Furigana: `text` at half size beside characters `start`..`start + length` of
    column `column` (vertical bubbles only). Not part of the phrase read."""

    column: int
    start: int
    length: int
    text: str


@dataclass
class SoundEffect:
    """Big bold lettering drawn on the art, outside any bubble, turned a little: not read."""

    center: tuple[int, int]
    text: str
    size: int = 84
    angle: float = -12.0


@dataclass
class Page:
    panels: list[Box]
    bubbles: list[Bubble]
    art: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    effects: list[SoundEffect] = field(default_factory=list)


PAGES: dict[str, Page] = {
    "001.png": Page(
        panels=[(306, 20, 580, 420), (20, 20, 294, 420), (20, 432, 580, 830)],
        bubbles=[
            Bubble((450, 160), ["おはよう", "ございます"], vertical=True),
            Bubble((150, 180), ["いい天気だね"], vertical=True),
            Bubble((300, 545), ["Good morning,", "Tokyo!"], vertical=False, size=28),
        ],
        art=[
            ("ellipse", (470, 660, 540, 730)),
            ("line", (40, 760, 560, 760)),
            ("rectangle", (80, 680, 180, 760)),
            ("polygon", (70, 680, 130, 630, 190, 680)),
        ],
    ),
    "002.png": Page(
        panels=[(20, 20, 580, 260), (306, 272, 580, 560), (20, 272, 294, 560), (20, 572, 580, 830)],
        bubbles=[
            Bubble((440, 70), ["翌朝、東京駅にて"], vertical=False, size=26, caption=True),
            Bubble((440, 410), ["電車が", "来たぞ！"], vertical=True),
            Bubble((157, 380), ["Wait", "for me!"], vertical=False, size=28),
            Bubble((450, 700), ["間に合った"], vertical=True),
            Bubble((170, 660), ["Made it!"], vertical=False, size=28),
        ],
        art=[
            ("rectangle", (60, 150, 540, 230)),
            ("line", (60, 190, 540, 190)),
            ("ellipse", (100, 470, 150, 520)),
        ],
    ),
    "003.png": Page(
        panels=[(20, 20, 580, 480), (306, 492, 580, 830), (20, 492, 294, 830)],
        bubbles=[
            Bubble((440, 200), ["ありがとう", "ございました"], vertical=True),
            Bubble((170, 150), ["See you", "tomorrow!"], vertical=False, size=28),
            Bubble((445, 650), ["ラーメン", "食べたい"], vertical=True),
            Bubble((157, 600), ["ドキドキ"], vertical=False, size=40, caption=True),
        ],
        art=[
            ("ellipse", (120, 300, 220, 400)),
            ("line", (170, 400, 170, 470)),
            ("ellipse", (90, 700, 220, 800)),
        ],
    ),
    # A tall panel on the right beside two stacked on the left: read panel by panel
    # (a row-by-row reading would take the left-hand panel's bubble second). Two
    # bubbles in one panel, furigana, and a sound effect that is not text.
    "005.png": Page(
        panels=[(306, 20, 580, 560), (20, 20, 294, 284), (20, 296, 294, 560), (20, 572, 580, 830)],
        bubbles=[
            Bubble((490, 165), ["いらっしゃい", "ませ"], vertical=True),
            Bubble((420, 420), ["ご注文は", "何ですか"], vertical=True),
            Bubble((157, 150), ["ラーメンを", "二つ"], vertical=True),
            Bubble((157, 430), ["少々お待ち", "ください"], vertical=True),
            Bubble(
                (470, 700),
                ["明日は", "晴れるかな"],
                vertical=True,
                ruby=[Ruby(0, 0, 2, "あした"), Ruby(1, 0, 1, "は")],
            ),
        ],
        art=[
            ("ellipse", (90, 620, 190, 720)),
            ("line", (40, 800, 300, 800)),
        ],
        effects=[SoundEffect((215, 690), "ドドド")],
    ),
    # A left-to-right page (an English comic): read left to right.
    "006.png": Page(
        panels=[(20, 20, 294, 420), (306, 20, 580, 420), (20, 432, 580, 830)],
        bubbles=[
            Bubble((157, 150), ["Where are", "we now?"], vertical=False, size=28),
            Bubble((443, 250), ["No idea."], vertical=False, size=28),
            Bubble((300, 560), ["Let's go", "home!"], vertical=False, size=28),
        ],
        art=[("ellipse", (120, 280, 200, 360)), ("line", (40, 760, 560, 760))],
    ),
    "004.png": Page(
        panels=[(20, 20, 580, 830)],
        bubbles=[],
        art=[
            ("ellipse", (200, 150, 400, 350)),
            ("line", (300, 350, 300, 600)),
            ("line", (300, 420, 200, 520)),
            ("line", (300, 420, 400, 520)),
            ("line", (300, 600, 220, 760)),
            ("line", (300, 600, 380, 760)),
            ("line", (40, 770, 560, 770)),
        ],
    ),
}


def font(size: int, file: Path = FONT_FILE) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(file), size, index=FONT_INDEX)


def draw_effect(image: Image.Image, effect: SoundEffect) -> None:
    """Bold lettering with a white outline, drawn on its own layer and turned."""
    face = font(effect.size, BOLD_FONT_FILE)
    box = face.getbbox(effect.text, direction="ttb", features=["vert"])
    layer = Image.new("LA", (int(box[2] - box[0]) + 40, int(box[3] - box[1]) + 40), (255, 0))
    ImageDraw.Draw(layer).text(
        (layer.width // 2, 20),
        effect.text,
        font=face,
        fill=(0, 255),
        direction="ttb",
        features=["vert"],
        anchor="mt",
        stroke_width=4,
        stroke_fill=(255, 255),
    )
    turned = layer.rotate(effect.angle, expand=True, resample=Image.Resampling.BICUBIC)
    cx, cy = effect.center
    image.paste(
        turned.getchannel("L"),
        (cx - turned.width // 2, cy - turned.height // 2),
        mask=turned.getchannel("A"),
    )


def draw_bubble(draw: ImageDraw.ImageDraw, bubble: Bubble) -> None:
    face = font(bubble.size)
    gap = bubble.size // 3
    if bubble.vertical:
        sizes = [face.getbbox(col, direction="ttb", features=["vert"]) for col in bubble.lines]
        column_width = bubble.size + gap
        width = column_width * len(bubble.lines) - gap
        height = int(max(box[3] - box[1] for box in sizes))
    else:
        sizes = [face.getbbox(line) for line in bubble.lines]
        line_height = bubble.size + gap
        width = int(max(box[2] - box[0] for box in sizes))
        height = line_height * len(bubble.lines) - gap
    cx, cy = bubble.center
    left, top = cx - width // 2, cy - height // 2
    if bubble.caption:
        pad_x, pad_y = 18, 14
    elif bubble.vertical:
        pad_x, pad_y = width // 2 + 22, height // 5 + 18
    else:
        pad_x, pad_y = width // 3 + 24, height // 4 + 22
    outline = (left - pad_x, top - pad_y, left + width + pad_x, top + height + pad_y)
    if bubble.caption:
        draw.rectangle(outline, fill=255, outline=0, width=2)
    else:
        draw.ellipse(outline, fill=255, outline=0, width=2)
    if bubble.vertical:
        # The first column is the rightmost: Japanese is read right to left.
        for i, column in enumerate(bubble.lines):
            x = left + width - i * column_width - bubble.size // 2
            draw.text(
                (x, top), column, font=face, fill=0, direction="ttb", features=["vert"], anchor="mt"
            )
        ruby_size = bubble.size // 2
        ruby_face = font(ruby_size)
        for ruby in bubble.ruby:
            # To the right of its characters, centred along them, nearly touching.
            x = left + width - ruby.column * column_width + ruby_size // 2 + 1
            span = ruby.length * bubble.size
            y = top + ruby.start * bubble.size + (span - len(ruby.text) * ruby_size) // 2
            draw.text(
                (x, y),
                ruby.text,
                font=ruby_face,
                fill=0,
                direction="ttb",
                features=["vert"],
                anchor="mt",
            )
    else:
        for i, line in enumerate(bubble.lines):
            draw.text((cx, top + i * line_height), line, font=face, fill=0, anchor="mt")


def draw_page(page: Page) -> Image.Image:
    image = Image.new("L", PAGE_SIZE, 255)
    draw = ImageDraw.Draw(image)
    for panel in page.panels:
        draw.rectangle(panel, outline=0, width=3)
    for shape, xy in page.art:
        if shape == "line":
            draw.line(xy, fill=60, width=3)
        elif shape == "polygon":
            draw.polygon(xy, outline=60, width=3)
        else:
            getattr(draw, shape)(xy, outline=60, width=3)
    for effect in page.effects:
        draw_effect(image, effect)
    for bubble in page.bubbles:
        draw_bubble(draw, bubble)
    # 16 grey levels keep anti-aliased text legible and the PNG small.
    return image.quantize(colors=16, dither=Image.Dither.NONE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    if not FONT_FILE.exists():
        raise SystemExit(f"{FONT_FILE} is missing: apt-get install fonts-noto-cjk")
    if not features.check("raqm"):
        raise SystemExit("Pillow lacks raqm text layout, needed for vertical text")
    args.out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, object] = {"font": FONT_NAME, "pages": {}, "not_text": {}}
    for name, page in PAGES.items():
        draw_page(page).save(args.out / name, optimize=True)
        manifest["pages"][name] = [bubble.phrase() for bubble in page.bubbles]  # type: ignore[index]
        drawn_not_text = [ruby.text for bubble in page.bubbles for ruby in bubble.ruby] + [
            effect.text for effect in page.effects
        ]
        if drawn_not_text:
            manifest["not_text"][name] = drawn_not_text  # type: ignore[index]
        print(f"{args.out / name}: {(args.out / name).stat().st_size // 1024} KiB")
    (args.out / "pages.json").write_text(
        json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
