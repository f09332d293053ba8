"""The detection model with its denormal weights set to zero, for the `ocr` analyzer.

A tenth of the detection model's weights (256 000 of 2.4 million) are denormal floats, closer
to zero than 1.2e-38: a CPU multiplies by them many times slower than by other numbers,
unless the thread that runs the model treats them as zero (a flag of the thread, which ONNX
Runtime sets only on its pool threads; a call with one thread runs on the caller's). Set to
zero, the detector takes a third of the CPU and gives the same boxes (docs/ocr.md, "Speed and
memory").

The model file is edited in place, without the `onnx` package: it costs the worker 13 MB of
memory once imported, and a float set to zero keeps its four bytes, so only the protobuf's
framing needs reading (field numbers from onnx.proto, stable since its first release).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import numpy as np

MODEL_GRAPH: Final = 7
"""`ModelProto.graph`."""
GRAPH_INITIALIZER: Final = 5
"""`GraphProto.initializer`: the weights, each a `TensorProto`."""
TENSOR_DATA_TYPE: Final = 2
"""`TensorProto.data_type`, `FLOAT` being 1."""
TENSOR_FLOAT_DATA: Final = 4
"""`TensorProto.float_data` (packed little-endian float32)."""
TENSOR_RAW_DATA: Final = 9
"""`TensorProto.raw_data` (little-endian, as the exporters write weights)."""
FLOAT: Final = 1
FLOAT32_TINY: Final = float(np.finfo(np.float32).tiny)
"""The smallest normal float32; a non-zero weight closer to zero than this is denormal."""
LENGTH_DELIMITED: Final = 2


def flush_denormals(model: bytearray) -> int:
    """Set the denormal float32 weights (initializers) of the serialized ONNX `model` to zero,
    in place; returns how many were set. Every other byte is left as it was. Raises
    `ValueError` for bytes that are not a protobuf message."""
    flushed = 0
    for graph in _payloads(model, 0, len(model), MODEL_GRAPH):
        for tensor in _payloads(model, *graph, GRAPH_INITIALIZER):
            data_type, data = 0, []
            for number, wire, start, end in _fields(model, *tensor):
                if number == TENSOR_DATA_TYPE and wire == 0:
                    data_type = _varint(model, start)[0]
                elif number in (TENSOR_RAW_DATA, TENSOR_FLOAT_DATA) and wire == LENGTH_DELIMITED:
                    data.append((start, end))
            if data_type != FLOAT:
                continue
            for start, end in data:
                weights = np.frombuffer(model, dtype="<f4", count=(end - start) // 4, offset=start)
                denormal = (weights != 0) & (np.abs(weights) < FLOAT32_TINY)
                weights[denormal] = 0
                flushed += int(denormal.sum())
    return flushed


def write_flushed_model(source: Path, target: Path) -> int:
    """Write the ONNX model at `source` to `target` with its denormal weights set to zero
    (`flush_denormals`); returns how many were set. A session built from a file keeps no copy
    of the model's bytes, as one built from bytes does."""
    model = bytearray(source.read_bytes())
    flushed = flush_denormals(model)
    target.write_bytes(model)
    return flushed


def _payloads(buffer: bytearray, start: int, end: int, number: int) -> Iterator[tuple[int, int]]:
    """Where each length-delimited field `number` of the message in `buffer[start:end]` lies."""
    for found, wire, value_start, value_end in _fields(buffer, start, end):
        if found == number and wire == LENGTH_DELIMITED:
            yield value_start, value_end


def _fields(buffer: bytearray, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """The fields of the protobuf message in `buffer[start:end]`: (number, wire type, where
    its value starts, where it ends)."""
    position = start
    while position < end:
        key, position = _varint(buffer, position)
        wire = key & 7
        if wire == 0:
            after = _varint(buffer, position)[1]
        elif wire == 1:
            after = position + 8
        elif wire == LENGTH_DELIMITED:
            length, position = _varint(buffer, position)
            after = position + length
        elif wire == 5:
            after = position + 4
        else:
            raise ValueError(f"not a protobuf message: wire type {wire} at byte {position}")
        if after > end:
            raise ValueError(f"not a protobuf message: a field runs past its end at {position}")
        yield key >> 3, wire, position, after
        position = after


def _varint(buffer: bytearray, position: int) -> tuple[int, int]:
    """The varint at `position` and the position after it."""
    value, shift = 0, 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise ValueError("not a protobuf message: a varint runs past the end")
        byte = buffer[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            return value, position
        shift += 7
