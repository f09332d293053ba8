"""The `ocr` analyzer alone: model load time, warm time per sample page, memory.

    .venv/bin/python -m bench.ocr                 # all cores
    taskset -c 0 .venv/bin/python -m bench.ocr --threads 1   # one core

Reads the pages in examples/sample_manga/ through the same path a job takes
(`prepare_image`, then `OcrAnalyzer.analyze`). No database needed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from manga_page_analysis.analysis.analyzer.prepared_image import prepare_image
from manga_page_analysis.analysis.reader.ocr_analyzer import OcrAnalyzer

SAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sample_manga"


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="warm reads per page")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads per call")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(
        f"cores available: {cores}, ONNX Runtime threads: {args.threads or 'default'}; "
        f"RSS before loading: {rss_mib():.0f} MiB"
    )
    analyzer = OcrAnalyzer(threads=args.threads)
    analyzer.load()
    print(f"model: {analyzer.model}")
    print(f"load + warm-up: {analyzer.load_seconds:.2f} s; RSS loaded: {rss_mib():.0f} MiB")
    pages = sorted(SAMPLES.glob("*.png"))
    images = {page.name: prepare_image(page.read_bytes()) for page in pages}
    for image in images.values():  # first read of each size: not counted
        analyzer.analyze(image, deadline=time.monotonic() + 600)
    all_times = []
    for name, image in images.items():
        times = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            analyzer.analyze(image, deadline=time.monotonic() + 600)
            times.append(time.perf_counter() - started)
        all_times += times
        print(
            f"  {name} {image.width}x{image.height}: median {statistics.median(times):.3f} s "
            f"(min {min(times):.3f}, max {max(times):.3f})"
        )
    print(
        f"all pages: median {statistics.median(all_times):.3f} s; "
        f"RSS after reading: {rss_mib():.0f} MiB; load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
