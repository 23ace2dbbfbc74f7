"""Generate the vision-language demo's tasksets: count the red squares in a picture.

    python examples/vlm/make_data.py [OUT_DIR]   # default: examples/vlm/data

Each row is a 56x56 white picture with 1 to 6 red squares (and up to 2 blue ones, which
do not count) scattered on a grid, stored in the row as a PNG data URL (``image``), the
question (``question``) and the count (``answer``): a reward function checks the count
exactly (``math_reward``). 48 training rows and 16 evaluation rows, fixed by a seed.
Nothing is downloaded and no image file is written: the pictures live in the rows.
"""

from __future__ import annotations

import base64
import io
import json
import random
import sys
from pathlib import Path

SIZE = 56
CELL = 9  # a 6 x 6 grid of cells, each square 6 pixels wide
QUESTION = "How many red squares are in the picture? Answer with a single number."
SEED = 20261128


def picture(red: int, blue: int, rng: random.Random) -> str:
    """A PNG data URL of ``red`` red and ``blue`` blue squares on distinct grid cells."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (SIZE, SIZE), "white")
    draw = ImageDraw.Draw(image)
    cells = rng.sample(range(36), red + blue)
    for i, cell in enumerate(cells):
        x, y = 2 + (cell % 6) * CELL, 2 + (cell // 6) * CELL
        draw.rectangle([x, y, x + 5, y + 5], fill="red" if i < red else "blue")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def rows(count: int, rng: random.Random) -> list[dict[str, str]]:
    out = []
    for _ in range(count):
        red, blue = rng.randint(1, 6), rng.randint(0, 2)
        out.append({"question": QUESTION, "answer": str(red), "image": picture(red, blue, rng)})
    return out


def main(out_dir: Path) -> None:
    rng = random.Random(SEED)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, count in (("train", 48), ("test", 16)):
        path = out_dir / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows(count, rng)))
        print(f"wrote {count} tasks to {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data")
