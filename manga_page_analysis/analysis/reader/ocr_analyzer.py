"""The `ocr` analyzer: in-process OCR with rapidocr, for `VISION_BACKEND=ocr` (docs/ocr.md).

Only the ONNX models inside rapidocr's wheel are used, by explicit path, so rapidocr never
resolves (and downloads) a default model.

Threads: worker threads share one engine without a lock. ONNX Runtime documents
`InferenceSession.run` as safe to call concurrently, and the model wrappers of rapidocr 3.x
keep per-call state on the stack (rapidocr loads its sessions under its own locks; its
detector's pre-processor, which its own call rebuilds into a shared attribute, is built per
call by `ocr_pipeline` instead).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import importlib.util
import io
import logging
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from manga_page_analysis.analysis.analyzer.answer import Analysis
from manga_page_analysis.analysis.analyzer.prepared_image import PreparedImage, undecodable
from manga_page_analysis.analysis.analyzer.protocol import READY, Readiness, VisionResult
from manga_page_analysis.analysis.reader.order.lines import TextLine
from manga_page_analysis.analysis.reader.recognition.column_holes import read_holes
from manga_page_analysis.analysis.reader.recognition.detect_and_read import read_lines
from manga_page_analysis.analysis.reader.recognition.marks import lone_marks
from manga_page_analysis.analysis.reader.recognition.model_weights import write_flushed_model
from manga_page_analysis.analysis.reader.regions.bubbles import empty_bubbles, uncovered_bubbles
from manga_page_analysis.analysis.reader.text.text_filter import read_page
from manga_page_analysis.analysis.reader.text.thresholds import (
    DEFAULT_THRESHOLDS,
    ReaderThresholds,
)
from manga_page_analysis.errors import DispatchTimeout, ImageError, ServiceError, VisionCancelled

logger = logging.getLogger(__name__)

DET_MODEL_FILE: Final = "PP-OCRv6_det_small.onnx"
"""Text detection model shipped in rapidocr's wheel (3.9 and newer), under `rapidocr/models/`."""
REC_MODEL_FILE: Final = "PP-OCRv6_rec_small.onnx"
"""Text recognition model shipped beside it: multilingual, dictionary embedded."""
WARM_UP_TEXT: Final = "Warm up 42"
"""Drawn and read once at load: proves both models run before the gate opens."""
CLOSE_WAIT_SECONDS: Final = 5.0
"""How long `close` waits for a load still under way (shutdown must take seconds)."""
DET_LIMIT_SIDE: Final = 4096
"""rapidocr's own detector resize, made a no-op for the sizes `ocr_pipeline` gives it."""
DET_UNCLIP_RATIO: Final = 1.3
"""How far detected boxes are grown (rapidocr: 1.6). Less keeps neighbouring columns and
their furigana in separate boxes instead of one box read as garbage."""
REC_MIN_WIDTH: Final = 240
"""Every line is padded to at least this width (px at the recogniser's 48 px height) before
recognition; rapidocr's 320 pads a two-character column to seven cells. 240 saves a
quarter of the recognition CPU and reads short lines better. Less (160) read the real
pages better still but lost "ー" and "っ" from short drawn columns (docs/ocr.md)."""
REC_BATCH: Final = 1
"""Lines recognised per call: one costs no CPU over six (no padding) and bounds memory (a
batch is padded to its widest line: six long lines took 800 MB)."""
DEFAULT_THREADS: Final = 1
"""ONNX Runtime threads per call: each worker thread runs its own page, so one thread per
call spends no CPU on spinning and synchronising threads."""
OCR_TEXT_MAX_CHARS: Final = 20_000
"""Bound on the stored text of one page (a dense page holds a few thousand characters)."""


class OcrModelError(ServiceError):
    """The OCR models cannot be used: a start-up error, not a job's failure."""

    retryable = False


class OcrModelMissing(OcrModelError):
    """A model file that should ship inside rapidocr's wheel is not there."""


def wheel_model_dir() -> Path:
    """`rapidocr/models/` of the installed package, found without importing it."""
    spec = importlib.util.find_spec("rapidocr")
    if spec is None or spec.origin is None:
        raise OcrModelMissing(
            "rapidocr is not installed, though manga-page-analysis depends on it: reinstall "
            "the package (`pip install --force-reinstall manga-page-analysis`; in a checkout "
            "`make install`)"
        )
    return Path(spec.origin).parent / "models"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


class OcrAnalyzer:
    """In-process OCR, an `Analyzer`. One per process; thread-safe. Building it checks that
    the model files exist (`OcrModelMissing`); `start` or `load` load and warm them up."""

    def __init__(
        self,
        *,
        model_dir: Path | None = None,
        threads: int | None = None,
        thresholds: ReaderThresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        """`threads`: ONNX Runtime's intra-op threads per call; `None` is `DEFAULT_THREADS`,
        `-1` lets ONNX Runtime choose (one per core). `thresholds`: what of the lines read
        is kept as text (the product's defaults unless an eval tries others)."""
        self._threads = DEFAULT_THREADS if threads is None else threads
        self.thresholds = thresholds
        model_dir = model_dir if model_dir is not None else wheel_model_dir()
        self.det_model_path = model_dir / DET_MODEL_FILE
        self.rec_model_path = model_dir / REC_MODEL_FILE
        missing = [
            path for path in (self.det_model_path, self.rec_model_path) if not path.is_file()
        ]
        if missing:
            present = sorted(path.name for path in model_dir.glob("*.onnx"))
            raise OcrModelMissing(
                f"OCR model file(s) missing: {', '.join(map(str, missing))} "
                f"(found there: {', '.join(present) or 'none'}). The `ocr` backend uses only the "
                "models inside rapidocr's wheel (rapidocr >= 3.9) and downloads nothing: "
                "reinstall it (`pip install --force-reinstall rapidocr`; in a checkout "
                "`make clean install`), or set VISION_URL to use a model server"
            )
        self.model = (
            f"rapidocr {_version('rapidocr')} {self.det_model_path.stem}+{self.rec_model_path.stem}"
            f" (onnxruntime {_version('onnxruntime')})"
        )
        self.name = f"in-process OCR ({self.model})"
        self.load_seconds: float | None = None
        """How long loading and warming up took, once loaded."""
        self.load_error: OcrModelError | None = None
        """Why the background load failed, if it did."""
        self._engine: Any = None
        self._ready = threading.Event()
        self._load_lock = threading.Lock()
        self._loader: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"OcrAnalyzer({self.model!r})"

    def readiness(self) -> Readiness:
        """Ready once the models are loaded and warmed up; until then `starting`."""
        if self._ready.is_set():
            return READY
        if self.load_error is not None:
            return Readiness(False, str(self.load_error))
        return Readiness(False, "the OCR models are loading", starting=True)

    def load(self) -> None:
        """Load and warm up the models now (once per analyzer); raises `OcrModelError`.
        rapidocr builds its ONNX sessions lazily, on the first call: the warm-up makes them."""
        with self._load_lock:
            if self._ready.is_set():
                return
            started = time.monotonic()
            try:
                from rapidocr import RapidOCR

                params: dict[str, Any] = {
                    # No direction classifier: manga text is not printed upside down.
                    "Global.use_cls": False,
                    "Det.limit_type": "max",
                    "Det.limit_side_len": DET_LIMIT_SIDE,
                    "Det.unclip_ratio": DET_UNCLIP_RATIO,
                    "EngineConfig.onnxruntime.intra_op_num_threads": self._threads,
                    "EngineConfig.onnxruntime.inter_op_num_threads": 1,
                    "Rec.rec_batch_num": REC_BATCH,
                    "Rec.rec_img_shape": [3, 48, REC_MIN_WIDTH],
                    # No memory arena: it keeps the peak of the largest page for good.
                    "EngineConfig.onnxruntime.enable_cpu_mem_arena": False,
                    "Global.log_level": "error",
                    "Rec.model_path": str(self.rec_model_path),
                }
                with tempfile.TemporaryDirectory(prefix="ocr-models-") as scratch:
                    # The detector runs the wheel's model with its denormal weights set to
                    # zero: a third of the CPU, the same boxes (ocr_weights). rapidocr builds
                    # a session on its first use: the detector's is built while the file is
                    # there (the session keeps no tie to it).
                    det_model = Path(scratch) / self.det_model_path.name
                    write_flushed_model(self.det_model_path, det_model)
                    params["Det.model_path"] = str(det_model)
                    engine: Any = RapidOCR(params=params)
                    engine._load_det_model()
                image = Image.new("RGB", (320, 64), "white")
                font = ImageFont.load_default(30)
                ImageDraw.Draw(image).text((16, 14), WARM_UP_TEXT, fill="black", font=font)
                warm_up = " ".join(block.text for block in read_page(*_lines(engine, image)))
            except Exception as exc:
                raise OcrModelError(
                    f"OCR models failed to load: {type(exc).__name__}: {exc}"
                ) from exc
            if not warm_up.strip():
                raise OcrModelError(
                    f"OCR models loaded but read nothing in the warm-up image ({WARM_UP_TEXT!r})"
                )
            self._engine = engine
            self.load_seconds = time.monotonic() - started
            self._ready.set()
        logger.info(
            "OCR models loaded and warmed up in %.1f s: %s (warm-up read %r)",
            self.load_seconds,
            self.model,
            warm_up,
        )

    def start(self, on_failure: Callable[[OcrModelError], None] | None = None) -> None:
        """Load on a background thread; `on_failure` is called if loading fails."""
        if self._loader is not None or self._ready.is_set():
            return

        def run() -> None:
            try:
                self.load()
            except OcrModelError as exc:
                self.load_error = exc
                logger.critical("%s; no page can be analysed until this is fixed", exc)
                if on_failure is not None:
                    on_failure(exc)

        self._loader = threading.Thread(target=run, name="ocr-model-loader", daemon=True)
        self._loader.start()

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """Wait for a background load to end; True when the models are ready."""
        if self._loader is not None:
            self._loader.join(timeout)
        return self._ready.is_set()

    def close(self, timeout: float = CLOSE_WAIT_SECONDS) -> None:
        """Give a background load a few seconds to end: it cannot be interrupted, and
        shutdown must not wait for it (the thread is a daemon and dies with the process)."""
        if self._loader is not None and not self.wait_loaded(timeout) and self._loader.is_alive():
            logger.info("OCR models still loading at shutdown; not waiting for them")

    def analyze(
        self,
        image: PreparedImage,
        *,
        deadline: float,
        cancel: threading.Event | None = None,
        job_label: str = "",
    ) -> VisionResult:
        """OCR one page. One OCR call cannot be interrupted: `cancel` and `deadline`
        are checked before it starts and after it ends."""
        _check(deadline, cancel, job_label)
        page = _decode(image)
        blocks = read_page(*self.lines(page), self.thresholds)
        _check(deadline, cancel, job_label)
        width, height = image.original_size or page.size
        scale_x, scale_y = width / page.width, height / page.height
        text = "\n".join(block.text for block in blocks)[:OCR_TEXT_MAX_CHARS]
        analysis = Analysis(
            ocr_text=text,
            tags=(),
            description="",
            nsfw_rating=None,
            nsfw_score=None,
            ocr_blocks=[block.as_json(scale_x, scale_y, size=(width, height)) for block in blocks],
        )
        return VisionResult(analysis=analysis, model=self.model)

    def lines(self, page: Image.Image) -> tuple[list[TextLine], np.ndarray[Any, Any]]:
        """The lines read on `page` and the page in grey: all the models' work, before the
        rules of what is kept (`text_filter.read_page`, cheap) are applied. The eval reads a
        page once this way and tries several `ReaderThresholds` on it."""
        if not self._ready.is_set():
            # The gate keeps jobs away until load; a host calling directly loads here.
            self.load()
        try:
            return _lines(self._engine, page)
        finally:
            if (trim := _malloc_trim()) is not None:
                trim(0)


def _lines(engine: Any, page: Image.Image) -> tuple[list[TextLine], np.ndarray[Any, Any]]:
    """The lines read on `page` (a balloon read again, columns and marks the first pass
    missed) and the page in grey."""
    lines = read_lines(engine, page)
    grey = np.asarray(page.convert("L"))
    # A balloon whose ink the lines found do not cover, or which holds lettering but no
    # line, is read again on its own; the first also enlarged (bubbles.uncovered_bubbles).
    uncovered = uncovered_bubbles(lines, grey)
    for x0, y0, x1, y1 in uncovered + empty_bubbles(lines, grey):
        known = [line.moved(-x0, -y0) for line in lines]
        twice = (x0, y0, x1, y1) in uncovered
        again = read_lines(engine, page.crop((x0, y0, x1, y1)), known, look_twice=twice)
        lines += [line.moved(x0, y0) for line in again]
    lines += read_holes(engine, page, lines, grey)  # a column missing from its pitch
    lines += lone_marks(engine, page, lines, grey)  # "……" alone in a balloon
    return lines, grey


def _check(deadline: float, cancel: threading.Event | None, job_label: str) -> None:
    if cancel is not None and cancel.is_set():
        raise VisionCancelled(f"{job_label}: OCR cancelled".lstrip(": "))
    if time.monotonic() >= deadline:
        raise DispatchTimeout(f"{job_label}: OCR ran past the job deadline".lstrip(": "))


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, called after each page. ONNX Runtime runs without its arena,
    so the models' working memory (about 200 MB for a page) comes from malloc, and glibc
    keeps freed blocks for reuse by the thread that freed them: an idle worker would stay
    at its peak. `malloc_trim` hands them back to the system."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc: nothing to do


def _decode(image: PreparedImage) -> Image.Image:
    """The page as RGB, transparent areas white (rapidocr reads palette PNGs as grey indices)."""
    try:
        with Image.open(io.BytesIO(image.data)) as opened:
            opened.load()
            if opened.mode in ("RGBA", "LA", "PA") or "transparency" in opened.info:
                rgba = opened.convert("RGBA")
                page = Image.new("RGB", rgba.size, "white")
                page.paste(rgba, mask=rgba.getchannel("A"))
                return page
            return opened.convert("RGB")
    except Exception as exc:
        raise ImageError(f"cannot decode page image for OCR: {undecodable(exc)}") from exc
