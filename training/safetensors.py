"""safetensors files without the safetensors package: an 8-byte little-endian header length, a JSON
header (each tensor's dtype, shape and [begin, end) byte range in the data; "__metadata__", string
to string), then the tensors' raw little-endian bytes, one after another.

    save_file({"tok_emb": tensor, ...}, "model.safetensors", metadata={"format": "pt"})
    tensors = load_file("model.safetensors")   # {name: torch.Tensor}

F32, F16 and BF16 tensors (what `photon convert --from` reads); the trainer writes its weights
with these, and tests write Hugging Face checkpoints with them.
"""

import json
import math
import struct
import sys

import numpy as np
import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
# Stored bytes -> tensor: bf16 has no NumPy type, so 16-bit values travel as int16 and are viewed.
BY_NAME = {"F32": (np.float32, torch.float32), "F16": (np.float16, torch.float16),
           "BF16": (np.int16, torch.bfloat16)}
assert sys.byteorder == "little", "tensors are written and read in the host's byte order"


def tensor_bytes(tensor):
    """The tensor's values, row-major and little-endian."""
    t = tensor.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save_file(tensors, path, metadata=None):
    """Writes {name: tensor} (float32, float16 or bfloat16) to path, in the order given."""
    specs = [(name, t.dtype, list(t.shape)) for name, t in tensors.items()]
    write_streamed(path, specs, lambda name: tensors[name], metadata)


def write_streamed(path, specs, make, metadata=None):
    """Writes the tensors of specs [(name, torch dtype, shape)] to path in that order, each made
    by make(name) only when it is written, so that a file larger than memory can be written."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dtype, shape in specs:
        if dtype not in DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has dtype {dtype}; "
                             f"float32, float16 and bfloat16 are written")
        size = math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
        header[name] = {"dtype": DTYPES[dtype], "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the reference pads it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, dtype, shape in specs:
            tensor = make(name)
            if tensor.dtype != dtype or list(tensor.shape) != list(shape):
                raise ValueError(f"{path}: tensor {name!r} is {tensor.dtype} {list(tensor.shape)}, "
                                 f"not the {dtype} {list(shape)} announced")
            f.write(tensor_bytes(tensor))


def load_file(path):
    """{name: tensor} of a file save_file (or any F32 / F16 / BF16 safetensors writer) wrote."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        np_type, torch_type = BY_NAME[entry["dtype"]]
        begin, end = entry["data_offsets"]
        values = np.frombuffer(data[begin:end], dtype=np_type).copy()
        tensor = torch.from_numpy(values).view(torch_type)
        tensors[name] = tensor.reshape(entry["shape"])
    return tensors
