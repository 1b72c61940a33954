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

From Python, kinds_of(module) reads the module types, and so does the command
line when the file holds a whole module (torch.save(model)). From a state_dict
alone a 2-D weight could be a Linear's or an Embedding's: one named with
--embedding is an Embedding's; an unnamed one that is not square is taken as
a Linear's (an Embedding's taken so would not fit its param's shape when
loaded); a square one must be named, with --embedding or --linear (module
paths or patterns such as 'layers.*'), or the conversion stops and says so.

    python3 scripts/torch_convert.py to-tg  model.pt   model.safetensors [--embedding tok]... [--linear PATH]...
    python3 scripts/torch_convert.py to-torch model.safetensors model.pt [--embedding tok]... [--linear PATH]...

Files on our side are safetensors of F32 (tg_session_load_params reads them).
Needs only torch; the safetensors format is read and written here.
"""
import argparse
import fnmatch
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


class AmbiguousWeights(ValueError):
    """Square 2-D weights whose module kind a state_dict does not tell."""


def _named(path, patterns):
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def _matrix_kind(name, path, t, embeddings, linears, ambiguous):
    """A 2-D weight's kind: named, else Linear when not square; square and
    unnamed goes to `ambiguous` (a Linear's is transposed, an Embedding's is
    not, and both fit a square param)."""
    if _named(path, embeddings):
        return EMBEDDING
    if t.shape[0] == t.shape[1] and not _named(path, linears):
        ambiguous.append(f"{name} {list(t.shape)}")
    return LINEAR


def _check_named(paths, embeddings, linears):
    for flag, patterns in (("--embedding", embeddings), ("--linear", linears)):
        for p in patterns:
            if not any(fnmatch.fnmatchcase(path, p) for path in paths):
                raise ValueError(f"{flag} {p}: no module of the file matches it")


def _refuse(ambiguous, what):
    if ambiguous:
        raise AmbiguousWeights(
            f"{len(ambiguous)} square 2-D weight(s) could be an nn.Linear's (stored transposed) or an "
            f"nn.Embedding's (kept as is), and {what} does not say which: " + ", ".join(ambiguous) +
            ". Name each module with --embedding PATH or --linear PATH (patterns such as 'layers.*' work), "
            "or convert the whole module: torch.save(model) for the command line, kinds_of(model) from Python.")


def guess_kinds(state_dict, embeddings=(), linears=()):
    """Kinds from names and ranks alone (a state_dict): a 2-D weight is an
    Embedding's when its module path matches one of `embeddings`, a Linear's
    when it matches `linears` or is not square; a square one that matches
    neither raises AmbiguousWeights, never a guess."""
    kinds, ambiguous = {}, []
    _check_named({_split(n)[0] for n in state_dict}, embeddings, linears)
    for name, t in state_dict.items():
        path, leaf = _split(name)
        if leaf != "weight":
            continue
        if t.dim() == 2:
            kinds[path] = _matrix_kind(name, path, t, embeddings, linears, ambiguous)
        elif t.dim() == 4:
            kinds[path] = CONV
        elif t.dim() == 1:
            has_bias = (path + ".bias") in state_dict
            kinds[path] = NORM if has_bias else NORM_NO_BIAS
    _refuse(ambiguous, "a state_dict")
    return kinds


def guess_kinds_tg(tensors, embeddings=(), linears=()):
    """The same from our names: a 2-D .W as guess_kinds decides, .g a norm gain."""
    kinds, ambiguous = {}, []
    _check_named({_split(n)[0] for n in tensors}, embeddings, linears)
    for name, t in tensors.items():
        path, leaf = _split(name)
        if leaf == "W":
            kinds[path] = _matrix_kind(name, path, t, embeddings, linears, ambiguous) if t.dim() == 2 else CONV
        elif leaf == "g":
            kinds[path] = NORM if (path + ".b") in tensors else NORM_NO_BIAS
    _refuse(ambiguous, "a weights file")
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
    ap.add_argument("--embedding", action="append", default=[],
                    help="module path (or pattern) of an Embedding (repeatable)")
    ap.add_argument("--linear", action="append", default=[],
                    help="module path (or pattern) of a Linear with a square weight (repeatable)")
    a = ap.parse_args(argv)
    try:
        if a.direction == "to-tg":
            obj = torch.load(a.src, map_location="cpu")
            if isinstance(obj, torch.nn.Module):  # a whole module: its types say each weight's kind
                kinds, sd = kinds_of(obj), obj.state_dict()
            else:
                kinds, sd = guess_kinds(obj, a.embedding, a.linear), obj
            write_safetensors(a.dst, to_tensorgrad(sd, kinds))
        else:
            tensors, _ = read_safetensors(a.src)
            torch.save(to_torch(tensors, guess_kinds_tg(tensors, a.embedding, a.linear)), a.dst)
    except ValueError as e:
        print(f"torch_convert: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
