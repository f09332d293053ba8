"""The detection model's denormal weights are set to zero, and nothing else is changed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from manga_page_analysis.analysis.reader.recognition.model_weights import (
    flush_denormals,
    write_flushed_model,
)

DENORMAL = np.float32(1e-40)
WEIGHTS = np.array([[0.5, DENORMAL], [-DENORMAL, 2.0], [0.0, -3.25]], dtype=np.float32)
SHAPE = np.array([1, 2], dtype=np.int64)


def _model(*, raw: bool = True) -> onnx.ModelProto:
    """y = x @ WEIGHTS, reshaped by an integer initializer (not a weight to flush). `raw`:
    the weights as raw bytes (as exporters write them), else as a list of floats."""
    weights = (
        numpy_helper.from_array(WEIGHTS, "weights")
        if raw
        else helper.make_tensor("weights", TensorProto.FLOAT, WEIGHTS.shape, WEIGHTS.ravel())
    )
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "weights"], ["product"]),
            helper.make_node("Reshape", ["product", "shape"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        initializer=[weights, numpy_helper.from_array(SHAPE, "shape")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _initializers(model: bytes) -> dict[str, np.ndarray]:
    parsed = onnx.load_from_string(model)
    return {init.name: numpy_helper.to_array(init) for init in parsed.graph.initializer}


@pytest.mark.parametrize("raw", [True, False], ids=["raw bytes", "float list"])
def test_denormal_weights_become_zero_and_every_other_byte_stays(raw: bool):
    original = _model(raw=raw).SerializeToString()
    model = bytearray(original)
    assert flush_denormals(model) == 2
    initializers = _initializers(bytes(model))
    assert initializers["weights"].tolist() == [[0.5, 0.0], [0.0, 2.0], [0.0, -3.25]]
    np.testing.assert_array_equal(initializers["shape"], SHAPE)
    assert len(model) == len(original)
    changed = [index for index, (a, b) in enumerate(zip(model, original, strict=True)) if a != b]
    assert 0 < len(changed) <= 8  # within the two floats set to zero


def test_a_model_without_denormals_is_left_as_it_was():
    model = bytearray(_model().SerializeToString())
    flush_denormals(model)
    before = bytes(model)
    assert flush_denormals(model) == 0
    assert bytes(model) == before


def test_bytes_that_are_no_model_are_refused():
    with pytest.raises(ValueError, match="not a protobuf message"):
        flush_denormals(bytearray(b"not an onnx model"))


def test_the_flushed_model_written_runs_with_the_denormal_weights_zero(tmp_path: Path):
    source, target = tmp_path / "tiny.onnx", tmp_path / "flushed.onnx"
    onnx.save(_model(), str(source))
    assert write_flushed_model(source, target) == 2
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.array([[1.0, 0.0, 0.0]], dtype=np.float32)})
    # Unflushed, the second output would be 1e-40.
    assert y.tolist() == [[0.5, 0.0]]
    assert _initializers(source.read_bytes())["weights"][0, 1] == DENORMAL  # left as it was
