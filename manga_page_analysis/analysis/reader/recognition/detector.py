"""rapidocr's text detector run on an image at a chosen scale, with the boxes it doubts kept
apart from those it is sure of (`detect_and_read` decides the scale and reads the boxes).

Uses the detector's model wrapper (`engine._load_det_model()`) rather than rapidocr's own
call, which has no per-call scale and rebuilds shared state on every call.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

DOUBTFUL_BOX_SCORE: Final = 0.4
"""A box the detector scores from this up to its own bar (0.5), which it would drop, is
doubtful: a line of white lettering outlined in black scores low. `detect_and_read` reads
it and keeps it only when it is read as words (`DOUBTFUL_MIN_TEXT_SCORE` there)."""


def detect(
    detector: Any, image: NDArray[np.uint8], scale: float
) -> tuple[list[NDArray[np.float32]], list[NDArray[np.float32]]]:
    """Quadrilaterals (4×2, in `image`'s pixels) found with the image scaled by `scale`, and
    those found doubtfully (`run_detector`)."""
    import cv2  # rapidocr's own dependency; its detector was trained on cv2-resized pages

    height, width = image.shape[:2]
    scaled: NDArray[Any] = image
    if scale != 1.0:
        size = (max(32, round(width * scale)), max(32, round(height * scale)))
        scaled = cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
    sure, doubtful = run_detector(detector, scaled)
    back = np.array([width / scaled.shape[1], height / scaled.shape[0]], dtype=np.float32)
    return (
        [np.asarray(box, dtype=np.float32) * back for box in sure],
        [np.asarray(box, dtype=np.float32) * back for box in doubtful],
    )


def run_detector(
    detector: Any, image: NDArray[Any]
) -> tuple[list[NDArray[np.int32]], list[NDArray[np.int32]]]:
    """The boxes rapidocr's detector finds in `image` (BGR), sorted as it sorts them, and
    apart from them those it scores from `DOUBTFUL_BOX_SCORE` up to its own bar (which it
    drops). What its own call does, with two costs left out: it rebuilds its pre-processor
    on every call (reading its settings through OmegaConf), and normalises the image in
    float64. Here it is normalised in float32, to the same bits: with a mean and standard
    deviation of 0.5, the subtraction is rounded once either way and the division is exact."""
    from rapidocr.ch_ppocr_det.utils import DBPostProcess, DetPreProcess

    prepare = DetPreProcess(
        detector.limit_side_len, detector.limit_type, list(detector.mean), list(detector.std)
    )
    resized = prepare.resize(image)  # to a multiple of 32 px, as the network requires
    if resized is None:
        return [], []
    mean, std = prepare.mean.astype(np.float32), prepare.std.astype(np.float32)
    normalized = (resized.astype(np.float32) * np.float32(prepare.scale) - mean) / std
    batch = np.ascontiguousarray(normalized.transpose(2, 0, 1)[np.newaxis])
    own = detector.postprocess_op
    # Built per call with the lower bar: the detector's own is shared between threads.
    lenient = DBPostProcess(
        thresh=own.thresh,
        box_thresh=min(own.box_thresh, DOUBTFUL_BOX_SCORE),
        max_candidates=own.max_candidates,
        unclip_ratio=own.unclip_ratio,
        score_mode=own.score_mode,
        use_dilation=own.dilation_kernel is not None,
    )
    boxes, scores = lenient(detector.session(batch), image.shape[:2])
    sure = [box for box, score in zip(boxes, scores, strict=True) if score >= own.box_thresh]
    doubtful = [box for box, score in zip(boxes, scores, strict=True) if score < own.box_thresh]
    return _sorted(detector, sure), _sorted(detector, doubtful)


def _sorted(detector: Any, boxes: list[NDArray[np.int32]]) -> list[NDArray[np.int32]]:
    return list(detector.sorted_boxes(np.array(boxes))) if boxes else []
