# The peer of bench/multi_gpu.sh: PyTorch DistributedDataParallel training
# torch_ref.py's gpt_small (fp32, TF32 off, AdamW 1e-3, weight decay 0.1,
# clip 1.0) on R processes, the global batch of 64 x 256 random tokens split
# R ways, NCCL between GPUs (process r on GPU r % GPUs), gloo on the CPU.
# Prints one JSON line: the median step time over the timed steps (every
# rank waits for its step, rank 0's times), and the all-reduce alone: one
# all_reduce of a buffer the size of every gradient, the ranks entering it
# together (DDP overlaps its buckets with the backward, so the step shows
# only what is left exposed).
# Usage: python3 torch_ddp.py RANKS [cuda|cpu] [STEPS]
# cpu (gloo) is for trying the script without a GPU: on a 2-core machine
# here, 2 ranks of a tiny model hung in about half the runs, before and
# after the model moved into torch_ref.py (not understood; NCCL on the
# H200 has not hung).
import json, os, socket, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref  # noqa: E402 (TF32 off, seed 0; its benches run only as a script)

B, T, V = torch_ref.GPT_SMALL_B, torch_ref.GPT_SMALL_T, torch_ref.GPT_SMALL_V

WARM = 5


def run(rank, R, dev, steps, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("nccl" if dev == "cuda" else "gloo", rank=rank, world_size=R)

    torch.manual_seed(0)
    d = torch.device("cuda", rank % torch.cuda.device_count()) if dev == "cuda" else torch.device("cpu")
    if dev == "cuda":
        torch.cuda.set_device(d)
    model = torch_ref.gpt_small().to(d)
    ddp = DDP(model, device_ids=[d.index] if dev == "cuda" else None)
    opt = torch_ref.gpt_small_optim(model)
    g = torch.Generator().manual_seed(1)
    tok, tgt = torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)
    rows = B // R
    x, y = tok[rank * rows:(rank + 1) * rows].to(d), tgt[rank * rows:(rank + 1) * rows].to(d)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(WARM):
        step()
    sync()
    dist.barrier()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        loss.item()
        sync()
        times.append(time.perf_counter() - t0)
    n = sum(p.numel() for p in model.parameters())
    buf = torch.zeros(n, device=d)
    ar = []
    for i in range(13):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        sync()
        if i >= 3:
            ar.append(time.perf_counter() - t0)
    if rank == 0:
        times.sort(), ar.sort()
        r = {"bench": "gpt_small_ddp", "impl": "pytorch", "device": dev, "ranks": R, "rows_per_rank": rows,
             "median_step_ms": round(times[len(times) // 2] * 1e3, 3), "min_step_ms": round(times[0] * 1e3, 3),
             "allreduce_bytes": n * 4, "allreduce_ms": round(ar[len(ar) // 2] * 1e3, 4),
             "loss": round(float(loss.detach()), 4), "torch": torch.__version__}
        with open(out, "w") as f:
            f.write(json.dumps(r) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    R = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    dev = sys.argv[2] if len(sys.argv) > 2 else ("cuda" if torch.cuda.is_available() else "cpu")
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    if B % R:
        sys.exit(f"torch_ddp.py: {R} ranks do not divide the batch of {B}")
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = f"/tmp/torch_ddp.{os.getpid()}.json"
    mp.spawn(run, args=(R, dev, steps, port, out), nprocs=R, join=True)
    with open(out) as f:
        sys.stdout.write(f.read())
    os.unlink(out)
