"""Measure the `ocr` analyzer on real pages: `make eval-ocr DATA=<folder>`.

Runs the real `OcrAnalyzer`, with the worker's image preparation, over the images of
`<folder>/ground_truth.json` and prints CER, blocks intact, reading order, CPU and wall
seconds per image and pooled; docs/ocr.md ("Measuring it") defines each figure and the format.
"""

from __future__ import annotations

import argparse
import difflib
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

from bench.ocr_lomo import EXCLUDED, GRID, describe, leave_one_manga_out, manga_of
from manga_page_analysis.analysis.reader.recognition.voicing import differs_in_voicing_only

INTACT_MAX_CER: Final = 0.25
"""A returned block reproduces a ground-truth block when its CER against it is at most this."""
FOUND_MAX_CER: Final = 0.5
"""A ground-truth block is found (for reading order) when its best returned block is this close."""
DROPPED_MIN_RUN: Final = 3
"""A found block lost a column when this many consecutive characters of it are missing."""
GARBAGE_MAX_COVERED: Final = 0.25
"""A returned block is garbage when at most this share of its box lies on ground-truth blocks
(it was read where there is nothing to read: art, an effect, background lettering)."""


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
    missed: int = 0
    """Ground-truth blocks not found at all (no returned block within `FOUND_MAX_CER`)."""
    dropped_columns: int = 0
    """Found blocks that lost `DROPPED_MIN_RUN` or more consecutive characters (a column)."""
    voicing_errors: int = 0
    """Characters read with a voiced mark lost, added or changed (ご→こ, ぶ→ぷ)."""
    garbage_chars: int = 0
    """Characters of returned blocks that lie on no ground-truth block (nor an ignore region)."""
    ignored_chars: int = 0
    """Characters of returned blocks in ignore regions (sound effects, lettering in the art,
    margins): left out of the CER, but read as text all the same."""
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    images: int = 0
    details: list[str] = field(default_factory=list)

    @property
    def cer(self) -> float:
        return self.errors / self.reference_chars if self.reference_chars else 0.0

    @property
    def order_errors(self) -> int:
        return self.pairs - self.pairs_in_order

    def add(self, other: Score) -> None:
        """Pool `other` into this score (every figure but the details)."""
        for name in (figure.name for figure in fields(self) if figure.name != "details"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _inside(box: Sequence[float], region: Sequence[float]) -> bool:
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return region[0] <= cx <= region[2] and region[1] <= cy <= region[3]


def unscorable_blocks(truth: dict[str, Any]) -> list[str]:
    """The texts of ground-truth blocks whose centre lies in an ignore region: any reading of
    them is left out as ignored (`score_image`), so they can never count as read. An ignore
    region is drawn round a sound effect or art, never over a block's middle."""
    ignore = [region["box"] for region in truth.get("ignore", [])]
    return [
        block["text"]
        for block in truth["blocks"]
        if "box" in block and any(_inside(block["box"], region) for region in ignore)
    ]


def score_image(truth: dict[str, Any], returned: Sequence[dict[str, Any]]) -> Score:
    """Score the returned blocks (`{"text", "box"?}`, in the order returned) of one image."""
    ignore = [region["box"] for region in truth.get("ignore", [])]
    kept, ignored = [], 0
    for block in returned:
        if "box" in block and any(_inside(block["box"], region) for region in ignore):
            ignored += len(normalise(block["text"]))
        else:
            kept.append(block)
    expected = [block["text"] for block in truth["blocks"]]
    reference = normalise("".join(expected))
    hypothesis = normalise("".join(block["text"] for block in kept))
    score = Score(
        errors=edit_distance(reference, hypothesis),
        reference_chars=len(reference),
        blocks=len(expected),
        images=1,
        ignored_chars=ignored,
    )
    found: list[int | None] = []
    for truth_block in truth["blocks"]:
        text = truth_block["text"]
        distances = [cer(text, block["text"]) for block in kept]
        # Of blocks read as closely (two balloons of "……"), the one on this block's box.
        best = min(
            range(len(kept)),
            key=lambda index: (distances[index], -_overlap(truth_block, kept[index])),
            default=None,
        )
        if best is not None and distances[best] <= INTACT_MAX_CER:
            score.intact += 1
        else:
            score.details.append(f"not intact: {text!r}")
        found.append(best if best is not None and distances[best] <= FOUND_MAX_CER else None)
        if found[-1] is None:
            score.missed += 1
        else:
            dropped, voicing = _alignment_errors(text, kept[found[-1]]["text"])
            score.dropped_columns += dropped
            score.voicing_errors += voicing
    for first, second in itertools.pairwise(found):
        if first is not None and second is not None:
            score.pairs += 1
            score.pairs_in_order += first < second
    truth_boxes = [block["box"] for block in truth["blocks"] if "box" in block]
    for block in kept:
        if "box" in block and _covered(block["box"], truth_boxes) <= GARBAGE_MAX_COVERED:
            score.garbage_chars += len(normalise(block["text"]))
    return score


def _alignment_errors(expected: str, returned: str) -> tuple[int, int]:
    """(1 if a run of `DROPPED_MIN_RUN` expected characters is missing, voiced-mark errors)."""
    reference, hypothesis = normalise(expected), normalise(returned)
    matcher = difflib.SequenceMatcher(None, reference, hypothesis, autojunk=False)
    dropped, voicing = 0, 0
    for tag, i0, i1, j0, j1 in matcher.get_opcodes():
        if tag in ("delete", "replace") and (i1 - i0) - (j1 - j0) >= DROPPED_MIN_RUN:
            dropped = 1
        if tag == "replace":
            pairs = zip(reference[i0:i1], hypothesis[j0:j1], strict=False)
            voicing += sum(1 for a, b in pairs if differs_in_voicing_only(a, b))
    return dropped, voicing


def _overlap(truth_block: dict[str, Any], block: dict[str, Any]) -> float:
    """The share of the ground-truth block's box that `block`'s box covers (0 without boxes)."""
    if "box" not in truth_block or "box" not in block:
        return 0.0
    return _covered(truth_block["box"], [block["box"]])


def _covered(box: Sequence[float], regions: Sequence[Sequence[float]]) -> float:
    """The share of `box` that lies on `regions` (overlaps between regions counted once each)."""
    area = max(1.0, (box[2] - box[0]) * (box[3] - box[1]))
    inside = sum(
        max(0.0, min(box[2], r[2]) - max(box[0], r[0]))
        * max(0.0, min(box[3], r[3]) - max(box[1], r[1]))
        for r in regions
    )
    return min(1.0, inside / area)


def _line(name: str, score: Score) -> str:
    order = f"{score.pairs_in_order}/{score.pairs}" if score.pairs else "-"
    per_image = max(score.images, 1)
    return (
        f"{name:<28} CER {score.cer:5.3f} ({score.errors}/{score.reference_chars})  "
        f"intact {score.intact}/{score.blocks}  order {order:>7}  "
        f"CPU s {score.cpu_seconds / per_image:6.2f}  wall s {score.wall_seconds / per_image:6.2f}"
        f"  | missed {score.missed} dropped {score.dropped_columns} voiced {score.voicing_errors}"
        f" garbage {score.garbage_chars} ignored {score.ignored_chars} order {score.order_errors}"
    )


def folds_by_manga(truth: dict[str, dict[str, Any]], count: int) -> list[list[str]]:
    """The pages split into `count` folds, never a manga across two: images of one manga
    (`ocr_lomo.manga_of`) go to the same fold, groups
    dealt in turn to the smallest fold, largest first (reproducible: by size, then name)."""
    groups: dict[str, list[str]] = {}
    for name, entry in truth.items():
        if entry.get("kind", "page") == "page":
            groups.setdefault(manga_of(name, entry), []).append(name)
    folds: list[list[str]] = [[] for _ in range(max(1, count))]
    for _, names in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        min(folds, key=len).extend(names)
    return [fold for fold in folds if fold]


def evaluate(
    folder: Path | Sequence[Path],
    *,
    only: Sequence[str] = (),
    verbose: bool = False,
    hold_out: Sequence[str] = (),
    folds: int = 0,
    lomo: bool = False,
) -> dict[str, Score]:
    """Run the analyzer over the folder (or folders, pooled as one set) and print the
    figures; returns the pooled scores.

    `hold_out`: image names also pooled apart from the rest ("held out" and "developed on").
    `folds`: the pages are also pooled in this many folds by manga (`folds_by_manga`), so
    that a change that helps one manga and hurts others shows in the spread between folds.
    `lomo`: each page is also read with every setting of `ocr_lomo.GRID` (one reading of the
    page, the kept-text rules applied once per setting), and each manga's pages pooled as
    read with the setting best on the other manga's pages (the held-out pages never fit)."""
    # Imported here: loading the analyzer module pulls in Pillow and the engine's wiring,
    # which `--help` does not need.
    from manga_page_analysis.analysis.analyzer.prepared_image import prepare_image
    from manga_page_analysis.analysis.reader.ocr_analyzer import OcrAnalyzer, _decode
    from manga_page_analysis.analysis.reader.text.text_filter import read_page

    truth: dict[str, dict[str, Any]] = {}
    image_folder: dict[str, Path] = {}
    for each in [folder] if isinstance(folder, Path) else folder:
        for name, entry in json.loads((each / "ground_truth.json").read_text("utf-8")).items():
            if name in truth:
                raise ValueError(f"{name} is in more than one folder")
            if name in EXCLUDED:
                print(f"left out: {name}: {EXCLUDED[name]}")
                continue
            if unscorable := unscorable_blocks(entry):
                raise ValueError(
                    f"{each / 'ground_truth.json'}: {name}: an ignore region covers the middle "
                    f"of {unscorable}: no reading of them could count; draw the region round "
                    "the effect or art alone"
                )
            truth[name] = entry
            image_folder[name] = each / "images" if (each / "images").is_dir() else each
    analyzer = OcrAnalyzer()
    cpu_started = time.process_time()
    analyzer.load()
    print(
        f"model: {analyzer.model}\nload: {analyzer.load_seconds:.2f} s wall, "
        f"{time.process_time() - cpu_started:.2f} s CPU"
    )
    pooled = {"all": Score(), "page": Score(), "crop": Score()}
    fold_of = {
        name: f"fold {index + 1}"
        for index, names in enumerate(folds_by_manga(truth, folds) if folds else [])
        for name in names
    }
    for name in fold_of.values():
        pooled.setdefault(name, Score())
    if hold_out:
        pooled["held out"], pooled["developed on"] = Score(), Score()
    by_setting: dict[str, list[Score]] = {}
    for name, entry in truth.items():
        if only and name not in only:
            continue
        image = prepare_image((image_folder[name] / name).read_bytes())
        cpu, wall = time.process_time(), time.perf_counter()
        # What `OcrAnalyzer.analyze` does, in its two parts: the lines are read once, and
        # what is kept of them is judged with each setting tried.
        page = _decode(image)
        lines, grey = analyzer.lines(page)
        size = image.original_size or page.size
        scale = (size[0] / page.width, size[1] / page.height)

        blocks = _returned(read_page(lines, grey, analyzer.thresholds), scale, size)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        score = score_image(entry, blocks)
        score.cpu_seconds, score.wall_seconds = cpu, wall
        if lomo and entry.get("kind", "page") == "page":
            by_setting[name] = [
                score_image(entry, _returned(read_page(lines, grey, setting), scale, size))
                for setting in GRID
            ]
            for each in by_setting[name]:  # the models' work is shared by every setting
                each.cpu_seconds, each.wall_seconds = cpu, wall
        print(_line(name, score))
        if verbose:
            for detail in score.details:
                print(f"    {detail}")
            for block in blocks:
                print(f"    -> {block.get('box')} {block.get('score')} {block['text']}")
        pooled["all"].add(score)
        pooled[entry.get("kind", "page")].add(score)
        if name in fold_of:
            pooled[fold_of[name]].add(score)
        if hold_out:
            pooled["held out" if name in hold_out else "developed on"].add(score)
    if by_setting:
        _pool_lomo(
            pooled,
            by_setting,
            {name: manga_of(name, truth[name]) for name in by_setting},
            hold_out,
            verbose=verbose,
        )
    print()
    for kind, score in pooled.items():
        if score.images:
            print(_line(f"pooled: {kind} ({score.images})", score))
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS: {peak_kib / 1024:.0f} MiB")
    return pooled


def _returned(
    blocks: Sequence[Any], scale: tuple[float, float], size: tuple[int, int]
) -> list[dict[str, Any]]:
    """The blocks as `ocr_blocks` holds them (`OcrAnalyzer.analyze`)."""
    return [block.as_json(*scale, size=size) for block in blocks]


def _pool_lomo(
    pooled: dict[str, Score],
    by_setting: dict[str, list[Score]],
    manga: dict[str, str],
    hold_out: Sequence[str],
    *,
    verbose: bool = False,
) -> None:
    """Pool "LOMO" (and its held-out part) into `pooled`, and print each manga's setting
    (and, `verbose`, every setting's figures over all the pages)."""
    chosen = leave_one_manga_out(
        by_setting,
        manga,
        errors=lambda score: (score.errors, -score.intact),
        fit_on=lambda name: name not in hold_out,
    )
    print(f"\nleave one manga out: {len(set(manga.values()))} manga, {len(GRID)} settings")
    for held in sorted(set(manga.values())):
        names = [name for name in by_setting if manga[name] == held]
        print(f"  {held}: {describe(GRID[chosen[names[0]]])}")
    pooled["LOMO"] = Score()
    if hold_out:
        pooled["LOMO held out"] = Score()
    for name, scores in by_setting.items():
        pooled["LOMO"].add(scores[chosen[name]])
        if name in hold_out:
            pooled["LOMO held out"].add(scores[chosen[name]])
    for index in range(len(GRID) if verbose else 0):
        every = Score()
        for scores in by_setting.values():
            every.add(scores[index])
        figures = _line(f"  setting {index}", every)
        print(figures.split("  CPU")[0] + figures[figures.index("  |") :])
        print(f"      {describe(GRID[index])}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ocr_eval", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "folder", type=Path, nargs="+", help="folders with ground_truth.json and images, pooled"
    )
    parser.add_argument("--only", nargs="*", default=(), help="only these image names")
    parser.add_argument("-v", "--verbose", action="store_true", help="print what was read")
    parser.add_argument(
        "--hold-out", nargs="*", default=(), help="also pool these images apart from the rest"
    )
    parser.add_argument(
        "--folds", type=int, default=0, help="also pool the pages in this many folds by manga"
    )
    parser.add_argument(
        "--lomo",
        action="store_true",
        help="also pool the pages leaving one manga out (thresholds chosen on the others)",
    )
    args = parser.parse_args(argv)
    for folder in args.folder:
        if not (folder / "ground_truth.json").is_file():
            parser.error(f"{folder / 'ground_truth.json'} not found")
    evaluate(
        args.folder,
        only=args.only,
        verbose=args.verbose,
        hold_out=args.hold_out,
        folds=args.folds,
        lomo=args.lomo,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
