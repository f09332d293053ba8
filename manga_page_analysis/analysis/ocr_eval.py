"""Measure the `ocr` analyzer on real pages: `make eval-ocr DATA=<folder>`.

Runs the real `OcrAnalyzer`, with the worker's image preparation, over the images of
`<folder>/ground_truth.json` and prints CER, blocks intact, reading order, CPU and wall
seconds per image and pooled; docs/ocr.md ("Measuring it") defines each figure and the format.
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import sys
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

INTACT_MAX_CER: Final = 0.25
"""A returned block reproduces a ground-truth block when its CER against it is at most this."""
FOUND_MAX_CER: Final = 0.5
"""A ground-truth block is found (for reading order) when its best returned block is this close."""


def normalise(text: str) -> str:
    """NFKC, all whitespace removed: width and spacing do not count."""
    return "".join(unicodedata.normalize("NFKC", text).split())


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions cost 1)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        previous = current
    return previous[-1]


def cer(reference: str, hypothesis: str) -> float:
    """Edit distance over the reference's length (normalised); 0 for two empty strings."""
    reference, hypothesis = normalise(reference), normalise(hypothesis)
    if not reference:
        return 0.0 if not hypothesis else 1.0
    return edit_distance(reference, hypothesis) / len(reference)


@dataclass
class Score:
    """The figures of one image, or pooled over several."""

    errors: int = 0
    reference_chars: int = 0
    blocks: int = 0
    intact: int = 0
    pairs: int = 0
    pairs_in_order: int = 0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    images: int = 0
    details: list[str] = field(default_factory=list)

    @property
    def cer(self) -> float:
        return self.errors / self.reference_chars if self.reference_chars else 0.0

    def add(self, other: Score) -> None:
        """Pool `other` into this score (every figure but the details)."""
        for name in (figure.name for figure in fields(self) if figure.name != "details"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _inside(box: Sequence[float], region: Sequence[float]) -> bool:
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return region[0] <= cx <= region[2] and region[1] <= cy <= region[3]


def score_image(truth: dict[str, Any], returned: Sequence[dict[str, Any]]) -> Score:
    """Score the returned blocks (`{"text", "box"?}`, in the order returned) of one image."""
    ignore = [region["box"] for region in truth.get("ignore", [])]
    kept = [
        block
        for block in returned
        if not ("box" in block and any(_inside(block["box"], region) for region in ignore))
    ]
    expected = [block["text"] for block in truth["blocks"]]
    reference = normalise("".join(expected))
    hypothesis = normalise("".join(block["text"] for block in kept))
    score = Score(
        errors=edit_distance(reference, hypothesis),
        reference_chars=len(reference),
        blocks=len(expected),
        images=1,
    )
    found: list[int | None] = []
    for text in expected:
        distances = [cer(text, block["text"]) for block in kept]
        best = min(range(len(kept)), key=distances.__getitem__, default=None)
        if best is not None and distances[best] <= INTACT_MAX_CER:
            score.intact += 1
        else:
            score.details.append(f"not intact: {text!r}")
        found.append(best if best is not None and distances[best] <= FOUND_MAX_CER else None)
    for first, second in itertools.pairwise(found):
        if first is not None and second is not None:
            score.pairs += 1
            score.pairs_in_order += first < second
    return score


def _line(name: str, score: Score) -> str:
    order = f"{score.pairs_in_order}/{score.pairs}" if score.pairs else "-"
    per_image = max(score.images, 1)
    return (
        f"{name:<28} CER {score.cer:5.3f} ({score.errors}/{score.reference_chars})  "
        f"intact {score.intact}/{score.blocks}  order {order:>7}  "
        f"CPU s {score.cpu_seconds / per_image:6.2f}  wall s {score.wall_seconds / per_image:6.2f}"
    )


def evaluate(folder: Path, *, only: Sequence[str] = (), verbose: bool = False) -> dict[str, Score]:
    """Run the analyzer over the folder and print the figures; returns the pooled scores."""
    # Imported here: loading the analyzer module pulls in Pillow and the engine's wiring,
    # which `--help` does not need.
    from manga_page_analysis.analysis.images import prepare_image
    from manga_page_analysis.analysis.ocr import OcrAnalyzer

    truth: dict[str, dict[str, Any]] = json.loads((folder / "ground_truth.json").read_text("utf-8"))
    images = folder / "images" if (folder / "images").is_dir() else folder
    analyzer = OcrAnalyzer()
    cpu_started = time.process_time()
    analyzer.load()
    print(
        f"model: {analyzer.model}\nload: {analyzer.load_seconds:.2f} s wall, "
        f"{time.process_time() - cpu_started:.2f} s CPU"
    )
    pooled = {"all": Score(), "page": Score(), "crop": Score()}
    for name, entry in truth.items():
        if only and name not in only:
            continue
        image = prepare_image((images / name).read_bytes())
        cpu, wall = time.process_time(), time.perf_counter()
        result = analyzer.analyze(image, deadline=time.monotonic() + 600)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        blocks = result.analysis.ocr_blocks or []  # the `ocr` analyzer always gives blocks
        score = score_image(entry, blocks)
        score.cpu_seconds, score.wall_seconds = cpu, wall
        print(_line(name, score))
        if verbose:
            for detail in score.details:
                print(f"    {detail}")
            for block in blocks:
                print(f"    -> {block.get('box')} {block.get('score')} {block['text']}")
        pooled["all"].add(score)
        pooled[entry.get("kind", "page")].add(score)
    print()
    for kind, score in pooled.items():
        if score.images:
            print(_line(f"pooled: {kind} ({score.images})", score))
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS: {peak_kib / 1024:.0f} MiB")
    return pooled


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m manga_page_analysis.analysis.ocr_eval", description=__doc__.splitlines()[0]
    )
    parser.add_argument("folder", type=Path, help="a folder with ground_truth.json and images")
    parser.add_argument("--only", nargs="*", default=(), help="only these image names")
    parser.add_argument("-v", "--verbose", action="store_true", help="print what was read")
    args = parser.parse_args(argv)
    if not (args.folder / "ground_truth.json").is_file():
        parser.error(f"{args.folder / 'ground_truth.json'} not found")
    evaluate(args.folder, only=args.only, verbose=args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
