# The PyTorch peer of bench/digits_bench.c: the same digits CNN (two conv +
# pool stages, linear head, batch 64, Adam, fp32) timed per training step on
# the CPU. Prints one JSON line like digits_bench.
# Usage: python3 digits_torch.py [steps]   (threads: TG_THREADS, else every CPU)
import json, os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
threads = int(os.environ.get("TG_THREADS") or len(os.sched_getaffinity(0)))
torch.set_num_threads(threads)
torch.manual_seed(0)


class CNN(nn.Module):
    def __init__(s):
        super().__init__()
        s.c1 = nn.Conv2d(1, 16, 3, padding=1)
        s.c2 = nn.Conv2d(16, 32, 3, padding=1)
        s.fc = nn.Linear(128, 10)

    def forward(s, x):
        h = F.max_pool2d(F.relu(s.c1(x)), 2)
        h = F.max_pool2d(F.relu(s.c2(h)), 2)
        return s.fc(h.reshape(h.shape[0], -1))


m = CNN()
opt = torch.optim.Adam(m.parameters(), 1e-3)
x = torch.rand(64, 1, 8, 8)
y = torch.randint(0, 10, (64,))


def step():
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    return loss.item()  # read back every step, as digits_bench does


for _ in range(20):
    step()
t = []
for _ in range(steps):
    t0 = time.perf_counter()
    loss = step()
    t.append((time.perf_counter() - t0) * 1e3)
t.sort()
print(json.dumps({"bench": "digits_cnn", "impl": "pytorch", "threads": threads, "steps": steps,
                  "min_step_ms": round(t[0], 4), "median_step_ms": round(t[steps // 2], 4),
                  "loss": round(loss, 4), "torch": torch.__version__}))
