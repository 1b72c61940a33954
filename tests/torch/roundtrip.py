"""tests/test_torch_convert.sh's Python half. `checks`: roundtrip, PyTorch ->
ours (a safetensors file) -> PyTorch must give back identical tensors, for
every module kind the converter maps; square, square 2-D weights are never
guessed. `mlp OUT X...`: converts a seeded 1-64-64-1 MLP into OUT and prints
its PyTorch outputs for the inputs X."""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import torch_convert as tc  # noqa: E402


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d))


class Zoo(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(12, 8)
        self.ln = torch.nn.LayerNorm(8)
        self.rms = RMSNorm(8)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 16), torch.nn.Linear(16, 4, bias=False)])
        self.conv = torch.nn.Conv2d(3, 6, 3, groups=3)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = torch.nn.Linear(1, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)

    def forward(self, x):
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


def roundtrip():
    torch.manual_seed(0)
    z = Zoo()
    with torch.no_grad():  # norms start at ones/zeros: make every tensor distinctive
        for p in z.parameters():
            p.copy_(torch.randn_like(p))
    sd = z.state_dict()
    kinds = tc.kinds_of(z)
    ours = tc.to_tensorgrad(sd, kinds)
    fails, checks = 0, 4
    want = {"tok.W": [12, 8], "ln.g": [8], "ln.b": [8], "rms.g": [8], "layers.0.W": [8, 16], "layers.0.b": [16],
            "layers.1.W": [16, 4], "conv.W": [6, 1, 3, 3], "conv.b": [6]}
    got = {k: list(v.shape) for k, v in ours.items()}
    if got != want:
        print(f"FAIL names/shapes: {got}")
        fails += 1
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "zoo.safetensors")
        tc.write_safetensors(path, ours)
        back_ours, _ = tc.read_safetensors(path)
        for direction, k in (("module types", kinds), ("names only", tc.guess_kinds_tg(back_ours, ["tok"]))):
            back = tc.to_torch(back_ours, k)
            same = back.keys() == sd.keys() and all(torch.equal(back[n], sd[n]) for n in sd)
            if not same:
                print(f"FAIL round trip ({direction}): tensors differ")
                fails += 1
        # The command-line guess from a state_dict agrees with the module types.
        if tc.guess_kinds(sd, ["tok"]) != kinds:
            print(f"FAIL guess_kinds: {tc.guess_kinds(sd, ['tok'])} != {kinds}")
            fails += 1
    print(f"roundtrip: {checks - fails} passed, {fails} failed")
    return 1 if fails else 0


def square():
    """Square 2-D weights are never guessed: from a state_dict the command
    line refuses them, naming each and --embedding, until each module is
    named; from a whole module it reads the types. The kinds it is told give
    the right layouts both ways."""
    import collections
    import contextlib
    import io
    torch.manual_seed(2)
    model = torch.nn.Sequential(collections.OrderedDict(
        tok=torch.nn.Embedding(16, 16), proj=torch.nn.Linear(16, 16), out=torch.nn.Linear(16, 4)))
    sd = model.state_dict()
    fails, checks = 0, 0

    def check(ok, what):
        nonlocal fails, checks
        checks += 1
        if not ok:
            print(f"FAIL square: {what}")
            fails += 1

    def convert(*args):  # the command line's main, in this process (importing torch again takes seconds)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = tc.main(list(args))
        return rc, err.getvalue()

    with tempfile.TemporaryDirectory() as d:
        sd_path, module_path = os.path.join(d, "sd.pt"), os.path.join(d, "module.pt")
        out, back = os.path.join(d, "out.safetensors"), os.path.join(d, "back.pt")
        torch.save(sd, sd_path)
        torch.save(model, module_path)
        rc, err = convert("to-tg", sd_path, out)
        check(rc == 2 and "tok.weight [16, 16]" in err and "proj.weight [16, 16]" in err and "--embedding" in err
              and "out.weight" not in err and not os.path.exists(out), f"no names: exit {rc}, {err!r}")
        rc, err = convert("to-tg", sd_path, out, "--embedding", "tok")
        check(rc == 2 and "proj.weight" in err and "tok.weight" not in err, f"--embedding tok alone: exit {rc}, {err!r}")
        rc, err = convert("to-tg", sd_path, out, "--embedding", "tokk", "--linear", "proj")
        check(rc == 2 and "--embedding tokk: no module" in err, f"a name that matches nothing: exit {rc}, {err!r}")
        for how, args in (("named", (sd_path, out, "--embedding", "tok", "--linear", "p*")), ("whole module", (module_path, out))):
            rc, err = convert("to-tg", *args)
            ours, _ = tc.read_safetensors(out) if rc == 0 else ({}, {})
            check(rc == 0 and torch.equal(ours.get("tok.W", torch.zeros(0)), sd["tok.weight"]) and
                  torch.equal(ours.get("proj.W", torch.zeros(0)), sd["proj.weight"].t()), f"{how}: exit {rc}, {err!r}")
        rc, err = convert("to-torch", out, back)
        check(rc == 2 and "tok.W [16, 16]" in err and "--embedding" in err, f"to-torch, no names: exit {rc}, {err!r}")
        rc, err = convert("to-torch", out, back, "--embedding", "tok", "--linear", "proj")
        got = torch.load(back) if rc == 0 else {}
        check(rc == 0 and got.keys() == sd.keys() and all(torch.equal(got[k], sd[k]) for k in sd),
              f"to-torch, named: exit {rc}, {err!r}")
    try:
        tc.guess_kinds(sd)
        check(False, "guess_kinds guessed a square weight")
    except tc.AmbiguousWeights:
        check(True, "")
    print(f"square: {checks - fails} passed, {fails} failed")
    return 1 if fails else 0


def mlp(out, xs):
    torch.manual_seed(1)
    net = MLP()
    tc.write_safetensors(out, tc.to_tensorgrad(net.state_dict(), tc.kinds_of(net)))
    with torch.no_grad():
        y = net(torch.tensor([[float(x)] for x in xs]))
    for v in y[:, 0].tolist():
        print(repr(v))
    return 0


if __name__ == "__main__":
    mode = sys.argv[1]
    # One process for both checks: importing torch takes seconds.
    sys.exit(roundtrip() | square() if mode == "checks" else mlp(sys.argv[2], sys.argv[3:]))
