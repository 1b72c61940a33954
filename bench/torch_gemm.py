# The peer of bench_tg --gemm-webgpu: square fp32 torch.mm (TF32 off) on CUDA,
# the same chain of 8 products per timed step, one JSON line per size.
# With --shapes, the peer of bench_tg --gemm-shapes-webgpu: gpt_small's own
# products (the same list), 4 independent products per step, each with its
# own operands, transposed operands as transposed views (cuBLAS reads them
# in place, as our kernels read them through strides).
# Usage: python3 torch_gemm.py SIZE...  |  python3 torch_gemm.py --shapes
import json, sys, time
import torch

torch.backends.cuda.matmul.allow_tf32 = False
CHAIN = 8
SHAPE_N = 4
SHAPES = [("qkv", 16384, 384, 384, False, False), ("up", 16384, 384, 1536, False, False),
          ("down", 16384, 1536, 384, False, False), ("dx.up", 16384, 1536, 384, False, True),
          ("dW.up", 384, 16384, 1536, True, False), ("dW.down", 1536, 16384, 384, True, False)]


BATCH = 8  # steps back to back per timed batch, one synchronization at its end (as bench_tg's time_batches)


def timed(step, reps=20):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(BATCH):
            step()
        torch.cuda.synchronize()
        t.append((time.perf_counter() - t0) / BATCH)
    t.sort()
    return t


if sys.argv[1:] == ["--shapes"]:
    for name, m, k, n, ta, tb in SHAPES:
        ops = []
        for _ in range(SHAPE_N):
            a = torch.randn(k, m, device="cuda").t() if ta else torch.randn(m, k, device="cuda")
            b = torch.randn(n, k, device="cuda").t() if tb else torch.randn(k, n, device="cuda")
            ops.append((a, b))

        def step():
            return sum((a @ b)[0, 0] for a, b in ops)  # one element of each

        t = timed(step)
        flop = SHAPE_N * 2.0 * m * k * n
        print(json.dumps({"bench": "gemm_shape", "impl": "pytorch", "shape": name, "m": m, "k": k, "n": n,
                          "ta": int(ta), "tb": int(tb), "tflops": round(flop / t[len(t) // 2] * 1e-12, 2),
                          "best_tflops": round(flop / t[0] * 1e-12, 2), "reps": len(t), "batch": BATCH}))
        del ops
    sys.exit(0)

for n in [int(a) for a in sys.argv[1:]] or [1024, 2048, 4096]:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda") / n ** 0.5

    def step():
        c = a @ b
        for _ in range(CHAIN - 1):
            c = c @ b
        return c[0].sum()  # as our loss (the sum of one row)

    t = timed(step)
    flop = CHAIN * 2.0 * n ** 3
    print(json.dumps({"bench": "gemm", "impl": "pytorch", "n": n, "tflops": round(flop / t[len(t) // 2] * 1e-12, 2),
                      "best_tflops": round(flop / t[0] * 1e-12, 2), "reps": len(t), "batch": BATCH, "chain": CHAIN}))
