#!/usr/bin/env python3
"""PyTorch weights <-> tensorgrad params (docs/pytorch.md).

Names are module paths in both ("layers.0.attn.q"); what differs is the last
part of each name and one layout:

    PyTorch                      tensorgrad
    Linear.weight   [out, in]    .W  [in, out]   (transposed)
    Linear.bias     [out]        .b  [out]
    Embedding.weight [V, D]      .W  [V, D]
    Conv2d.weight [O, I/g, k, k] .W  [O, I/g, k, k]
    Conv2d.bias                  .b
    LayerNorm.weight / .bias     .g / .b
    RMSNorm.weight               .g

From Python, kinds_of(module) reads the module types. From the command line
only a state_dict is known, so a 2-D .weight is taken as Linear unless its
module is named with --embedding.

    python3 scripts/torch_convert.py to-tg  model.pt   model.safetensors [--embedding tok]...
    python3 scripts/torch_convert.py to-torch model.safetensors model.pt [--embedding tok]...

Files on our side are safetensors of F32 (tg_session_load_params reads them).
Needs only torch; the safetensors format is read and written here.
"""
import argparse
import json
import struct
import sys

import torch

LINEAR, EMBEDDING, CONV, NORM, NORM_NO_BIAS = "linear", "embedding", "conv", "norm", "rmsnorm"


def kinds_of(module):
    """{module path: kind} for every module whose params we know how to map."""
    kinds = {}
    for path, m in module.named_modules():
        name = type(m).__name__
        if isinstance(m, torch.nn.Linear):
            kinds[path] = LINEAR
        elif isinstance(m, torch.nn.Embedding):
            kinds[path] = EMBEDDING
        elif isinstance(m, torch.nn.Conv2d):
            kinds[path] = CONV
        elif isinstance(m, torch.nn.LayerNorm):
            kinds[path] = NORM
        elif name == "RMSNorm":
            kinds[path] = NORM_NO_BIAS
    return kinds


def _split(name):
    path, _, leaf = name.rpartition(".")
    return path, leaf


def guess_kinds(state_dict, embeddings=()):
    """Kinds from names and ranks alone: 2-D weights are Linear unless listed."""
    kinds = {}
    for name, t in state_dict.items():
        path, leaf = _split(name)
        if leaf != "weight":
            continue
        if path in embeddings:
            kinds[path] = EMBEDDING
        elif t.dim() == 2:
            kinds[path] = LINEAR
        elif t.dim() == 4:
            kinds[path] = CONV
        elif t.dim() == 1:
            has_bias = (path + ".bias") in state_dict
            kinds[path] = NORM if has_bias else NORM_NO_BIAS
    return kinds


def guess_kinds_tg(tensors, embeddings=()):
    """The same from our names: .W 2-D is Linear unless listed, .g is a norm gain."""
    kinds = {}
    for name, t in tensors.items():
        path, leaf = _split(name)
        if leaf == "W":
            kinds[path] = EMBEDDING if path in embeddings else LINEAR if t.dim() == 2 else CONV
        elif leaf == "g":
            kinds[path] = NORM if (path + ".b") in tensors else NORM_NO_BIAS
    return kinds


_TO_TG = {"weight": {LINEAR: "W", EMBEDDING: "W", CONV: "W", NORM: "g", NORM_NO_BIAS: "g"}, "bias": "b"}


def to_tensorgrad(state_dict, kinds):
    """A PyTorch state_dict -> {our name: float32 tensor}. Unknown names are an error."""
    out = {}
    for name, t in state_dict.items():
        path, leaf = _split(name)
        kind = kinds.get(path)
        if kind is None or leaf not in _TO_TG:
            raise ValueError(f"{name}: not a param of a Linear, Embedding, Conv2d, LayerNorm or RMSNorm")
        t = t.detach().to(torch.float32)
        if leaf == "weight":
            out[f"{path}.{_TO_TG['weight'][kind]}"] = t.t().contiguous() if kind == LINEAR else t.contiguous()
        else:
            out[f"{path}.b"] = t.contiguous()
    return out


def to_torch(tensors, kinds):
    """{our name: tensor} -> a PyTorch state_dict (the reverse of to_tensorgrad)."""
    out = {}
    for name, t in tensors.items():
        path, leaf = _split(name)
        kind = kinds.get(path)
        if kind is None or leaf not in ("W", "g", "b"):
            raise ValueError(f"{name}: not a .W, .g or .b of a known module")
        if leaf == "b":
            out[f"{path}.bias"] = t.clone()
        else:
            out[f"{path}.weight"] = t.t().contiguous() if kind == LINEAR else t.clone()
    return out


def write_safetensors(path, tensors, meta=None):
    """{name: tensor} as safetensors, F32 (I32 for integer tensors), names sorted."""
    header, blobs, off = {"__metadata__": dict(meta or {})}, [], 0
    for key in sorted(tensors):
        t = tensors[key].detach().contiguous()
        dtype = "I32" if not t.is_floating_point() else "F32"
        raw = t.numpy().astype("<i4" if dtype == "I32" else "<f4").tobytes()
        header[key] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """-> ({name: tensor}, metadata); F32 and I32 only."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        if h["dtype"] not in ("F32", "I32"):
            raise ValueError(f"{path}: {name} is {h['dtype']}; only F32 and I32 are read")
        a, b = h["data_offsets"]
        raw = bytearray(data[8 + n + a:8 + n + b])
        t = torch.frombuffer(raw, dtype=torch.float32 if h["dtype"] == "F32" else torch.int32) if raw else \
            torch.zeros(0, dtype=torch.float32)
        out[name] = t.reshape(h["shape"]).clone()
    return out, meta


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("direction", choices=["to-tg", "to-torch"])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--embedding", action="append", default=[], help="module path of an Embedding (repeatable)")
    a = ap.parse_args(argv)
    if a.direction == "to-tg":
        sd = torch.load(a.src, map_location="cpu")
        if not isinstance(sd, dict):
            sd = sd.state_dict()
        write_safetensors(a.dst, to_tensorgrad(sd, guess_kinds(sd, a.embedding)))
    else:
        tensors, _ = read_safetensors(a.src)
        torch.save(to_torch(tensors, guess_kinds_tg(tensors, a.embedding)), a.dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
