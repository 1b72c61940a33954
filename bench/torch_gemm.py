# The peer of bench_tg --gemm-webgpu: square fp32 torch.mm (TF32 off) on CUDA,
# the same chain of 8 products per timed step, one JSON line per size.
# Usage: python3 torch_gemm.py SIZE...
import json, sys, time
import torch

torch.backends.cuda.matmul.allow_tf32 = False
CHAIN = 8
for n in [int(a) for a in sys.argv[1:]] or [1024, 2048, 4096]:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda") / n ** 0.5
    def step():
        c = a @ b
        for _ in range(CHAIN - 1):
            c = c @ b
        return c[0].sum().item()  # a read-back per step, as our loss (the sum of one row)
    for _ in range(3):
        step()
    t = []
    for _ in range(20):
        t0 = time.perf_counter()
        step()
        t.append(time.perf_counter() - t0)
    t.sort()
    flop = CHAIN * 2.0 * n ** 3
    print(json.dumps({"bench": "gemm", "impl": "pytorch", "n": n, "tflops": round(flop / t[len(t) // 2] * 1e-12, 2),
                      "best_tflops": round(flop / t[0] * 1e-12, 2), "reps": len(t), "chain": CHAIN}))
