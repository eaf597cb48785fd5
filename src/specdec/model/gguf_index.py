"""A GGUF file's tensor table, read without building its metadata values.

gguf-py's ``GGUFReader`` makes a numpy view of every part of every metadata value; the
bundled model's 49k-token vocabulary alone makes ~750k of them, which took 1.3-2 s of
each engine's start. The weights need only the tensor table, so this reads the header,
steps over the metadata (keeping the few scalars asked for) and returns each tensor's
name, ggml type, dims and bytes: a view of the memory-mapped file, copied by nobody.

Layout (GGUF v2 / v3, little-endian): magic ``GGUF``, u32 version, u64 tensor count,
u64 metadata count; the metadata (key string, u32 value type, value); the tensor table
(name string, u32 dims count, u64 dims, u32 ggml type, u64 offset); then the tensor
data from the next multiple of ``general.alignment`` (32 by default). A string is a
u64 length and its bytes; an array a u32 item type, a u64 count and the items.

Every read is bounds-checked: a truncated or corrupt file raises :class:`GgufFormatError`
naming the file and the byte offset.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_MAGIC = b"GGUF"
_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
_MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
_MAX_NESTING = 8  # arrays of arrays: a forged file would otherwise recurse without bound
# Metadata value types (gguf.GGUFValueType) -> the layout of a scalar.
_SCALARS = {kind: struct.Struct(fmt) for kind, fmt in {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d"}.items()}
_STRING, _ARRAY = 8, 9
_U32, _U64 = _SCALARS[4], _SCALARS[10]


class GgufFormatError(ValueError):
    """The file is not a GGUF file this reader understands, or is cut short."""


@dataclass(frozen=True)
class GgufTensorInfo:
    name: str
    type_name: str  # as gguf.GGMLQuantizationType spells it: "Q4_1", "F32" ...
    dims: tuple[int, ...]  # ggml order: dims[0] is the length of a row
    data: np.ndarray  # uint8, the tensor's bytes (a read-only view of the mapped file)


@dataclass(frozen=True)
class GgufIndex:
    path: Path
    version: int
    alignment: int
    metadata: dict[str, object]  # the scalar and string values asked for, by key
    tensors: list[GgufTensorInfo]


class _Cursor:
    def __init__(self, path: Path, buffer: mmap.mmap):
        self.path, self.buffer, self.offset = path, buffer, 0

    def fail(self, what: str) -> GgufFormatError:
        return GgufFormatError(f"{self.path}: {what} at byte {self.offset}")

    def take(self, size: int) -> int:
        """The current offset, then moves past ``size`` bytes that must exist."""
        start = self.offset
        if size < 0 or size > len(self.buffer) - start:
            raise self.fail(f"{size} bytes past the end of the file")
        self.offset = start + size
        return start

    def unpack(self, fmt: struct.Struct):
        return fmt.unpack_from(self.buffer, self.take(fmt.size))[0]

    def u32(self) -> int:
        return self.unpack(_U32)

    def u64(self) -> int:
        return self.unpack(_U64)

    def string(self) -> str:
        size = self.u64()
        start = self.take(size)
        try:
            return self.buffer[start:start + size].decode()
        except UnicodeDecodeError as e:
            raise self.fail(f"a string that is not UTF-8 ({e.reason})") from None

    def skip_string(self) -> None:
        self.take(self.u64())

    def value(self, kind: int, keep: bool, depth: int = 0):
        """Reads (``keep``) or steps over one metadata value of type ``kind``."""
        if depth > _MAX_NESTING:
            raise self.fail(f"arrays nested more than {_MAX_NESTING} deep")
        if kind in _SCALARS:
            if keep:
                return self.unpack(_SCALARS[kind])
            self.take(_SCALARS[kind].size)
        elif kind == _STRING:
            if keep:
                return self.string()
            self.skip_string()
        elif kind == _ARRAY:
            item, count = self.u32(), self.u64()
            if item in _SCALARS:
                self.take(count * _SCALARS[item].size)
            elif item in (_STRING, _ARRAY):
                for _ in range(count):  # the file's end stops a forged count
                    self.value(item, keep=False, depth=depth + 1)
            else:
                raise self.fail(f"unknown array item type {item}")
        else:
            raise self.fail(f"unknown metadata value type {kind}")
        return None


def read_gguf_index(path: str | Path, keys: tuple[str, ...] = ("general.architecture",)
                    ) -> GgufIndex:
    """The tensor table of the GGUF file at ``path``, and the metadata values of ``keys``
    that are scalars or strings (arrays are stepped over)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            raise GgufFormatError(f"{path}: empty file")
        buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    cursor = _Cursor(path, buffer)
    if buffer[:4] != _MAGIC:
        raise GgufFormatError(f"{path}: not a GGUF file (magic {bytes(buffer[:4])!r})")
    cursor.take(4)
    version = cursor.u32()
    if version not in _VERSIONS:
        raise cursor.fail(f"GGUF version {version} (big-endian or unsupported; "
                          f"this reader takes {_VERSIONS})")
    tensor_count, kv_count = cursor.u64(), cursor.u64()

    wanted = set(keys) | {"general.alignment"}
    metadata: dict[str, object] = {}
    for _ in range(kv_count):
        key = cursor.string()
        kind = cursor.u32()
        if key == "general.alignment" and kind != 4:
            raise cursor.fail(f"general.alignment of value type {kind}, not u32")
        value = cursor.value(kind, keep=key in wanted)
        if value is not None:
            metadata[key] = value
    alignment = metadata.pop("general.alignment", _DEFAULT_ALIGNMENT)
    if alignment == 0 or alignment & (alignment - 1):
        raise GgufFormatError(f"{path}: general.alignment {alignment!r} is not a power of two")

    table = []
    for _ in range(tensor_count):
        name = cursor.string()
        n_dims = cursor.u32()
        if not 1 <= n_dims <= _MAX_DIMS:
            raise cursor.fail(f"tensor {name!r} with {n_dims} dims")
        dims = tuple(cursor.u64() for _ in range(n_dims))
        kind, offset = cursor.u32(), cursor.u64()
        table.append((name, dims, kind, offset))
    data_start = -(-cursor.offset // alignment) * alignment

    tensors, names = [], set()
    for name, dims, kind, offset in table:
        if name in names:
            raise GgufFormatError(f"{path}: tensor {name!r} twice")
        names.add(name)
        try:
            ggml_type = GGMLQuantizationType(kind)
            block, block_bytes = GGML_QUANT_SIZES[ggml_type]
        except (ValueError, KeyError):
            raise GgufFormatError(f"{path}: tensor {name!r} of unknown ggml type {kind}") from None
        elements = int(np.prod(dims, dtype=object))
        if dims[0] % block:
            raise GgufFormatError(f"{path}: tensor {name!r} rows of {dims[0]} are not whole "
                                  f"{ggml_type.name} blocks of {block}")
        size = elements // block * block_bytes
        start = data_start + offset
        if start + size > len(buffer):
            raise GgufFormatError(f"{path}: tensor {name!r} ({size} bytes at {start}) runs "
                                  f"past the end of the file ({len(buffer)} bytes)")
        data = np.frombuffer(buffer, dtype=np.uint8, count=size, offset=start)
        tensors.append(GgufTensorInfo(name, ggml_type.name, dims, data))
    return GgufIndex(path, version, alignment, metadata, tensors)
