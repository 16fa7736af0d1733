"""Tiny pure-Python safetensors writer and reader (struct + json only).

The same format and byte layout as attograd/autograd/io/safetensors.{h,cpp} and the
reference implementation (huggingface/safetensors), so files written here are
byte-identical to files written by attograd's C++ writer:

    [8 bytes]  N = header length, little-endian u64
    [N bytes]  compact UTF-8 JSON: "__metadata__" first (if any), then one
               {"dtype", "shape", "data_offsets"} entry per tensor in layout
               order; padded with spaces so that 8 + N is a multiple of 8
    [rest]     tensor data, row-major, little-endian, packed; tensors laid out
               by descending dtype alignment (I64, F64, F32, BF16, BOOL), then name

Supported dtypes: F32, F64, I64, BF16, BOOL. Values are plain `Array`s; torch
tensors (float32/float64/int64/bfloat16/bool) are accepted by the writer, and
`Array.to_torch()` turns a read tensor back into one. Neither torch, numpy nor
the `safetensors` package is needed to import this module.

    import safetensors_io as st
    st.save("x.safetensors", {"w": st.Array.from_list([1, 2, 3, 4], [2, 2], "F32")},
            metadata={"format": "pt"})
    tensors, metadata = st.load("x.safetensors")
    tensors["w"].tolist()   # [[1.0, 2.0], [3.0, 4.0]]
"""

import json
import os
import struct

# dtype code -> (struct format char, element size, layout rank; higher goes first).
# BF16 is packed as its raw 16-bit patterns ("H"); flat() widens them to floats.
DTYPES = {
    "F32": ("f", 4, 11),
    "F64": ("d", 8, 12),
    "I64": ("q", 8, 13),
    "BF16": ("H", 2, 8),
    "BOOL": ("?", 1, 0),
}
MAX_HEADER_BYTES = 100_000_000


class SafetensorsError(ValueError):
    pass


def bf16_bits(value):
    """The bfloat16 nearest a float, as attograd and PyTorch's c10 round: to the
    float32 first, then to nearest even on the upper 16 bits; a NaN is 0x7FC0."""
    try:
        (u,) = struct.unpack("<I", struct.pack("<f", value))
    except OverflowError:  # beyond float32's range: infinity, as the C++ cast gives
        return 0xFF80 if value < 0 else 0x7F80
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return 0x7FC0
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(bits):
    """The float a bfloat16 pattern stands for (exact)."""
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class Array:
    """A tensor as the file holds it: dtype code, shape tuple, little-endian bytes."""

    def __init__(self, dtype, shape, data):
        if dtype not in DTYPES:
            raise SafetensorsError(f"unsupported dtype {dtype!r} (supported: {', '.join(DTYPES)})")
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        self.data = bytes(data)
        need = _numel(self.shape) * DTYPES[dtype][1]
        if len(self.data) != need:
            raise SafetensorsError(f"{len(self.data)} bytes do not fit shape {list(self.shape)} of {dtype} ({need} bytes)")

    @classmethod
    def from_list(cls, values, shape, dtype):
        """values: flat, row-major."""
        values = list(values)
        if len(values) != _numel(shape):
            raise SafetensorsError(f"{len(values)} values do not fill shape {list(shape)}")
        fmt_char = DTYPES[dtype][0]
        if dtype == "BOOL":
            values = [bool(v) for v in values]
        elif dtype == "I64":
            values = [int(v) for v in values]
        elif dtype == "BF16":
            values = [bf16_bits(float(v)) for v in values]
        else:
            values = [float(v) for v in values]
        return cls(dtype, shape, struct.pack(f"<{len(values)}{fmt_char}", *values))

    @classmethod
    def from_torch(cls, t):
        import torch

        codes = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.bfloat16: "BF16",
                 torch.bool: "BOOL"}
        if t.dtype not in codes:
            raise SafetensorsError(
                f"unsupported torch dtype {t.dtype} (supported: float32, float64, int64, bfloat16, bool)")
        dtype = codes[t.dtype]
        t = t.detach().cpu().contiguous()
        if dtype == "BF16":  # numpy has no bfloat16: keep the bit patterns
            t = t.view(torch.int16)
        try:
            import numpy  # noqa: F401  (fast path)

            little = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "BF16": "<i2", "BOOL": "|b1"}[dtype]
            data = t.numpy().astype(little, copy=False).tobytes()
        except ImportError:
            flat = t.reshape(-1).tolist()
            data = struct.pack(f"<{len(flat)}{'h' if dtype == 'BF16' else DTYPES[dtype][0]}", *flat)
        return cls(dtype, tuple(t.shape), data)

    def flat(self):
        """The values in row-major order (BF16 widened to floats, exactly)."""
        fmt_char, size, _ = DTYPES[self.dtype]
        values = list(struct.unpack(f"<{len(self.data) // size}{fmt_char}", self.data))
        return [bf16_value(b) for b in values] if self.dtype == "BF16" else values

    def tolist(self):
        """Nested lists like torch's tolist(); a 0-d array gives its value."""
        values = self.flat()

        def nest(vals, shape):
            if not shape:
                return vals[0]
            step = _numel(shape[1:])
            return [nest(vals[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]

        return nest(values, self.shape)

    def to_torch(self):
        import torch

        if self.dtype == "BF16":
            bits = torch.tensor(list(struct.unpack(f"<{len(self.data) // 2}h", self.data)), dtype=torch.int16)
            return bits.view(torch.bfloat16).reshape(self.shape)
        dtype = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool}[self.dtype]
        return torch.tensor(self.flat(), dtype=dtype).reshape(self.shape)

    def __eq__(self, other):
        return isinstance(other, Array) and (self.dtype, self.shape, self.data) == (other.dtype, other.shape, other.data)

    def __repr__(self):
        return f"Array({self.dtype}, shape={list(self.shape)}, {self.tolist()})"


def _as_array(name, value):
    if isinstance(value, Array):
        return value
    if type(value).__module__.startswith("torch"):
        return Array.from_torch(value)
    raise SafetensorsError(f"tensor {name!r}: expected an Array or a torch tensor, got {type(value).__name__}")


def serialize(tensors, metadata=None):
    """dict name -> Array | torch.Tensor, optional dict str -> str  ->  bytes."""
    arrays = {}
    for name, value in tensors.items():
        if name == "__metadata__":
            raise SafetensorsError('"__metadata__" is reserved and cannot name a tensor')
        arrays[name] = _as_array(name, value)
    layout = sorted(arrays, key=lambda n: (-DTYPES[arrays[n].dtype][2], n))

    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SafetensorsError(f"metadata must map str to str, got {k!r}: {v!r}")
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata)}
    offset = 0
    for name in layout:
        a = arrays[name]
        header[name] = {"dtype": a.dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(a.data)]}
        offset += len(a.data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(arrays[n].data for n in layout)


def save(path, tensors, metadata=None):
    """Write atomically: temp file, fsync, rename over path."""
    data = serialize(tensors, metadata)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise SafetensorsError(f"key {k!r} appears more than once in the header")
        out[k] = v
    return out


def _is_uint(x):
    return type(x) is int and x >= 0


def parse(data, source="<memory>"):
    """bytes -> (dict name -> Array, dict metadata). Validates like the C++ reader."""

    def bad(msg):
        raise SafetensorsError(f"{source}: {msg}")

    if len(data) < 8:
        bad(f"the file is {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER_BYTES:
        bad(f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if n > len(data) - 8:
        bad(f"header length {n} runs past the end of the file")
    text = data[8:8 + n]
    if not text.startswith(b"{"):
        bad("the header must be a JSON object starting with '{'")
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        bad(f"the header is not valid JSON ({e})")
    except SafetensorsError as e:  # a duplicate key
        bad(str(e))
    buffer = data[8 + n:]

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        bad('"__metadata__" must be an object of string values')
    entries = []
    for name, e in header.items():
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= e.keys():
            bad(f"tensor {name!r}: expected an object with dtype, shape and data_offsets")
        dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in DTYPES:
            bad(f"tensor {name!r}: unsupported dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_uint(s) for s in shape):
            bad(f"tensor {name!r}: shape {shape!r} is not a list of non-negative integers")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_uint(o) for o in offsets):
            bad(f"tensor {name!r}: data_offsets {offsets!r} is not [begin, end]")
        begin, end = offsets
        if begin > end or end > len(buffer):
            bad(f"tensor {name!r}: data_offsets {offsets} out of range for a {len(buffer)}-byte buffer")
        if end - begin != _numel(shape) * DTYPES[dtype][1]:
            bad(f"tensor {name!r}: data_offsets {offsets} do not match shape {shape} of {dtype}")
        entries.append((begin, end, name, dtype, shape))
    covered = 0
    for begin, end, name, _, _ in sorted(entries):
        if begin != covered:
            bad(f"tensor {name!r}: data_offsets [{begin}, {end}] overlap or leave a gap (expected begin {covered})")
        covered = end
    if covered != len(buffer):
        bad(f"the tensors cover {covered} of the {len(buffer)} buffer bytes")

    tensors = {}
    for begin, end, name, dtype, shape in entries:
        if dtype == "BOOL" and any(b > 1 for b in buffer[begin:end]):
            bad(f"tensor {name!r}: BOOL bytes must be 0 or 1")
        tensors[name] = Array(dtype, shape, buffer[begin:end])
    return tensors, metadata


def load(path):
    with open(path, "rb") as f:
        return parse(f.read(), path)


if __name__ == "__main__":
    import sys

    for p in sys.argv[1:]:
        tensors, metadata = load(p)
        print(f"{p}: {len(tensors)} tensors, metadata {metadata}")
        for name in sorted(tensors):
            a = tensors[name]
            print(f"  {name}: {a.dtype} {list(a.shape)}")
