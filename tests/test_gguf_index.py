"""The GGUF tensor table (``model/gguf_index.py``) against gguf-py's full reader: the
bundled model, and written files that hold every metadata value type."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from specdec.model.gguf_index import GgufFormatError, read_gguf_index
from specdec.model.loader import default_model_path


def assert_same_as_gguf_py(path: Path, index) -> None:
    reader = gguf.GGUFReader(str(path))
    assert [t.name for t in index.tensors] == [t.name for t in reader.tensors]
    for mine, theirs in zip(index.tensors, reader.tensors, strict=True):
        assert mine.type_name == theirs.tensor_type.name, mine.name
        assert mine.dims == tuple(int(d) for d in theirs.shape), mine.name
        their_bytes = np.asarray(theirs.data).reshape(-1).view(np.uint8)
        assert np.array_equal(mine.data, their_bytes), mine.name


def test_bundled_model_table_matches_gguf_py():
    path = default_model_path()
    index = read_gguf_index(path)
    assert index.metadata == {"general.architecture": "llama"}
    assert len(index.tensors) == 272
    assert {t.type_name for t in index.tensors} >= {"Q4_1", "Q8_0", "F32"}
    assert_same_as_gguf_py(path, index)


def write_gguf(path: Path, alignment: int | None = None) -> None:
    """A file with a value of every metadata type (arrays of strings and of arrays too),
    dense and quantized tensors, and optionally its own alignment."""
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_uint8("t.u8", 200)
    writer.add_int8("t.i8", -3)
    writer.add_uint16("t.u16", 60000)
    writer.add_int16("t.i16", -300)
    writer.add_uint32("t.u32", 4_000_000_000)
    writer.add_int32("t.i32", -70000)
    writer.add_float32("t.f32", 1.5)
    writer.add_uint64("t.u64", 2**60)
    writer.add_int64("t.i64", -(2**40))
    writer.add_float64("t.f64", -2.25)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "héllo")
    writer.add_array("t.ints", [1, 2, 3])
    writer.add_array("t.strs", ["a", "", "ünïcode", "z" * 300])
    writer.add_array("t.nested", [[1, 2], [3]])
    writer.add_array("t.empty", [])
    rng = np.random.default_rng(0)
    writer.add_tensor("dense.weight", rng.standard_normal((3, 64), dtype=np.float32))
    q8 = rng.integers(0, 256, size=(5, 2 * 34), dtype=np.uint8)  # 5 rows of 64 (2 blocks)
    writer.add_tensor("q8.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("vec", rng.standard_normal(7, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("alignment", [None, 64, 256])
def test_written_file_table_and_values(tmp_path, alignment):
    path = tmp_path / "t.gguf"
    write_gguf(path, alignment)
    keys = ("general.architecture", "t.u8", "t.i8", "t.u16", "t.i16", "t.u32", "t.i32",
            "t.f32", "t.u64", "t.i64", "t.f64", "t.bool", "t.str", "t.ints", "missing")
    index = read_gguf_index(path, keys)
    assert index.alignment == (alignment or 32)
    assert index.metadata == {
        "general.architecture": "llama", "t.u8": 200, "t.i8": -3, "t.u16": 60000,
        "t.i16": -300, "t.u32": 4_000_000_000, "t.i32": -70000, "t.f32": 1.5,
        "t.u64": 2**60, "t.i64": -(2**40), "t.f64": -2.25, "t.bool": True, "t.str": "héllo"}
    assert [(t.name, t.type_name, t.dims) for t in index.tensors] == [
        ("dense.weight", "F32", (64, 3)), ("q8.weight", "Q8_0", (64, 5)), ("vec", "F32", (7,))]
    assert_same_as_gguf_py(path, index)
    assert not index.tensors[0].data.flags.writeable


def test_every_cut_of_a_file_is_refused_or_read_whole(tmp_path):
    """A file cut anywhere in its header, metadata or tensor table raises GgufFormatError
    naming it; cut in the data, the tensors that no longer fit are named."""
    path = tmp_path / "t.gguf"
    write_gguf(path)
    whole = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    for size in range(0, len(whole) - 1, 7):
        cut.write_bytes(whole[:size])
        with pytest.raises(GgufFormatError, match="cut.gguf"):
            read_gguf_index(cut)


@pytest.mark.parametrize(("offset", "value", "match"), [
    (0, b"GGUG", "not a GGUF file"),
    (4, (1).to_bytes(4, "little"), "version 1"),
    (4, (3).to_bytes(4, "big"), "big-endian"),
])
def test_bad_header_is_refused(tmp_path, offset, value, match):
    path = tmp_path / "t.gguf"
    write_gguf(path)
    data = bytearray(path.read_bytes())
    data[offset:offset + len(value)] = value
    path.write_bytes(bytes(data))
    with pytest.raises(GgufFormatError, match=match):
        read_gguf_index(path)


def test_forged_array_count_stops_at_the_end_of_the_file(tmp_path):
    """An array of strings claiming 2^63 items is refused when the file ends, not
    walked (or allocated) item by item forever."""
    path = tmp_path / "t.gguf"
    write_gguf(path)
    data = bytearray(path.read_bytes())
    key = b"t.strs"
    at = data.index(key) + len(key) + 4 + 4  # past the key, value type, item type
    data[at:at + 8] = (2**63).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(GgufFormatError, match="past the end"):
        read_gguf_index(path)


def test_deeply_nested_arrays_are_refused_not_recursed(tmp_path):
    """Metadata whose one value is an array of arrays 10 000 deep: a precise error, not
    a RecursionError."""
    key = b"deep"
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    body += struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 10_000
    path = tmp_path / "deep.gguf"
    path.write_bytes(body)
    with pytest.raises(GgufFormatError, match="nested more than 8 deep"):
        read_gguf_index(path)
