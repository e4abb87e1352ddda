#!/usr/bin/env python3
"""PyTorch's side of bench_zero: the same MLP (or, with --model resnet18,
torchvision's ResNet-18 with 10 classes; with --model gpt, the same
transformer stack), Adam and global batch, on the
gloo backend with 2 (--ranks) processes, one thread each; DistributedDataParallel
+ Adam ("ddp") and ZeroRedundancyOptimizer(Adam) ("zero1"). Not a test.

    python3 tests/perf/bench_zero_torch.py --mode zero1 --steps 100

Prints per rank what bench_zero prints: the optimizer state bytes, the peak
resident memory (VmHWM) and its growth over the start, and the mean step
time after 5 warm-up steps. Each mode runs in fresh processes, so each peak
is its own.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

WARMUP = 5


def status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def state_bytes(opt):
    if isinstance(opt, ZeroRedundancyOptimizer):
        opt = opt.optim  # this rank's partition
    return sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
               if torch.is_tensor(t) and t.dim() > 0)


def run(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    rss_before = status_mib("VmRSS")
    torch.manual_seed(0)
    if args.model == "resnet18":
        import torchvision
        net = torchvision.models.resnet18(num_classes=10)
    elif args.model == "gpt":  # bench_zero's: pre-norm layers, heads of 64, GELU, no dropout
        net = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(
            args.width, args.width // 64, 4 * args.width, dropout=0.0, activation="gelu", batch_first=True,
            norm_first=True) for _ in range(args.layers)])
    else:
        layers = []
        for i in range(args.layers):
            layers.append(torch.nn.Linear(args.width, args.width))
            if i + 1 < args.layers:
                layers.append(torch.nn.ReLU())
        net = torch.nn.Sequential(*layers)
    model = DistributedDataParallel(net)
    if args.mode == "ddp":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    torch.manual_seed(7)
    if args.model == "resnet18":  # random images and labels, as bench_zero's
        x_all = torch.randn(args.batch, 3, args.width, args.width)
        y_all = torch.randn(args.batch, 10).argmax(1)
        loss_fn = torch.nn.functional.cross_entropy
    elif args.model == "gpt":
        x_all = torch.randn(args.batch, args.context, args.width)
        y_all = torch.randn(args.batch, args.context, args.width) * 0.5
        loss_fn = torch.nn.functional.mse_loss
    else:
        x_all = torch.randn(args.batch, args.width)
        y_all = torch.tanh(x_all @ (torch.randn(args.width, args.width) * 0.05))
        loss_fn = torch.nn.functional.mse_loss
    lo, hi = args.batch * rank // args.ranks, args.batch * (rank + 1) // args.ranks
    x, y = x_all[lo:hi].contiguous(), y_all[lo:hi].contiguous()
    seconds = 0.0
    for s in range(args.steps + WARMUP):
        dist.barrier()
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s >= WARMUP:
            seconds += time.perf_counter() - t0
    peak = status_mib("VmHWM")
    for r in range(args.ranks):
        dist.barrier()
        if r == rank:
            print(f"rank {r}: optimizer state {state_bytes(opt) / 2**20:.2f} MiB, peak RSS {peak:.1f} MiB "
                  f"(+{peak - rss_before:.1f} over the start), {1e3 * seconds / args.steps:.2f} ms/step", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "zero1"], default="ddp")
    p.add_argument("--model", choices=["mlp", "resnet18", "gpt"], default="mlp")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--ranks", type=int, default=2)
    args = p.parse_args()
    what = {"resnet18": f"ResNet-18 on {args.width}x{args.width} images",
            "gpt": f"{args.layers} transformer layers of width {args.width}, context {args.context}"}.get(
        args.model, f"{args.layers} x {args.width} MLP")
    print(f"PyTorch {torch.__version__} {args.mode} on {args.ranks} ranks (gloo): {what}, "
          f"Adam, global batch {args.batch}, {args.steps} steps", flush=True)
    mp.spawn(run, args=(args,), nprocs=args.ranks)


if __name__ == "__main__":
    main()
