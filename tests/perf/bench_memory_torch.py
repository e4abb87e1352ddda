#!/usr/bin/env python3
"""PyTorch's side of bench_memory: the same pre-norm GPT layer stack (causal
attention, tanh GELU, no dropout) trained one step at a time with
torch.utils.checkpoint, in the modes bench_memory.cpp runs:
  none       nothing checkpointed;
  full       each layer checkpointed (use_reentrant=False);
  attention  selective checkpointing that saves the attention ops' results;
  products   selective checkpointing that saves the matmuls' and attention's;
  alternate  as products, saving every other matmul (torchtitan's policy);
  attn+fc1   saving attention's results and the third matmul (the first
             feed-forward linear) of each layer;
  in+attn+fc2  saving attention's results, the first matmul (the
             in-projection) and the fourth (the second feed-forward linear);
  attn+fc1+fc2  saving attention's results and the third and fourth matmuls.
Each mode runs in a child process. PyTorch's CPU allocator has no memory
statistics, so the activation peak is the process's peak resident set during
a step above its resident set before it (after a warm-up step, with the
gradients allocated, freed memory handed back by malloc_trim, and the peak
reset through /proc/self/clear_refs). Compare its ratios against `none`
with bench_memory's, not the absolute figures.

  python3 tests/perf/bench_memory_torch.py --width 256 --layers 8 --context 1024 --batch 8
"""
import argparse
import ctypes
import functools
import gc
import statistics
import struct
import subprocess
import sys
import time

MODES = ["none", "full", "attention", "products", "alternate", "attn+fc1", "in+attn+fc2", "attn+fc1+fc2"]


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field + " not in /proc/self/status")


def policy(saved, pick):
    """A fresh policy per checkpoint call; `pick(n)` chooses which matmuls
    (by index in the layer's run) are saved, counted separately in the
    forward and the recomputation; None saves every one in `saved`."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy
    products = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}
    count = {False: 0, True: 0}

    def fn(ctx, op, *args, **kwargs):
        keep = op in saved
        if pick and op in products:
            keep = pick(count[ctx.is_recompute])
            count[ctx.is_recompute] += 1
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return fn


def saved_ops(mode):
    import torch
    aten = torch.ops.aten
    attention = {getattr(aten, name).default for name in (
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
        if hasattr(aten, name)}
    if mode == "attention":
        return attention
    return attention | {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}


def child(a, mode):
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    torch.manual_seed(0)
    layers = torch.nn.ModuleList(
        torch.nn.TransformerEncoderLayer(a.width, a.heads, 4 * a.width, dropout=0.0,
                                         activation=lambda t: F.gelu(t, approximate="tanh"),
                                         batch_first=True, norm_first=True) for _ in range(a.layers))
    x = torch.randn(a.batch, a.context, a.width)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(a.context)
    kwargs = {"use_reentrant": False}
    picks = {"alternate": lambda n: n % 2 == 0, "attn+fc1": lambda n: n == 2,
             "in+attn+fc2": lambda n: n in (0, 3), "attn+fc1+fc2": lambda n: n in (2, 3)}
    if mode != "none" and mode != "full":
        kwargs["context_fn"] = lambda: create_selective_checkpoint_contexts(
            policy(saved_ops(mode), picks.get(mode)))
    libc = ctypes.CDLL("libc.so.6")

    def step():
        h = x
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            for layer in layers:
                f = functools.partial(layer, src_mask=mask, is_causal=True)
                h = f(h) if mode == "none" else checkpoint(f, h, **kwargs)
            loss = (h.float() * h.float()).mean()
        loss.backward()

    step()  # warm-up: the gradients are allocated, kernels chosen
    times, peaks = [], []
    for _ in range(a.steps):
        for p in layers.parameters():
            p.grad.zero_()
        gc.collect()
        libc.malloc_trim(0)
        base = rss_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
        peaks.append((rss_kib("VmHWM") - base) / 1024)
    h = 1469598103934665603
    for p in layers.parameters():
        for v in p.grad.flatten().tolist()[:4096]:
            h = ((h ^ struct.unpack("<I", struct.pack("<f", v))[0]) * 1099511628211) % (1 << 64)
    print(f"{max(peaks):.3f} {statistics.median(times):.3f} {h}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("width", 256), ("layers", 8), ("heads", 4), ("context", 1024), ("batch", 8), ("steps", 3)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--autocast", action="store_true", help="bfloat16 autocast")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: all cores, as mixgrad)")
    ap.add_argument("--child", choices=MODES)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated modes to run (none always first)")
    a = ap.parse_args()
    if a.threads:
        import torch
        torch.set_num_threads(a.threads)
    if a.child:
        child(a, a.child)
        return 0
    import torch
    print(f"## PyTorch {torch.__version__} (torch.utils.checkpoint), same model: width {a.width}, {a.layers} layers, "
          f"{a.heads} heads, context {a.context}, batch {a.batch}, {'bfloat16 autocast' if a.autocast else 'float32'}, "
          f"median of {a.steps} steps; peak = resident-set growth")
    print("| mode | activation peak MiB | x none | step ms | x none | gradients (first 4096 of each) |")
    print("|---|---|---|---|---|---|")
    none = None
    wanted = ["none"] + [m for m in a.modes.split(",") if m and m != "none"]
    for mode in wanted:
        if mode not in MODES:
            print(f"unknown mode {mode!r}; the modes are {', '.join(MODES)}", file=sys.stderr)
            return 2
        args = [sys.executable, __file__, "--child", mode] + [
            f"--{k}={getattr(a, k)}" for k in ("width", "layers", "heads", "context", "batch", "steps", "threads")]
        out = subprocess.run(args + (["--autocast"] if a.autocast else []), capture_output=True, text=True)
        if out.returncode != 0:
            print(f"| {mode} | failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode} |")
            continue
        peak, ms, h = out.stdout.split()
        peak, ms = float(peak), float(ms)
        none = none or (peak, ms, h)
        print(f"| {mode} | {peak:.1f} | {peak / none[0]:.2f} | {ms:.0f} | {ms / none[1]:.2f} | "
              f"{'bit-identical' if h == none[2] else 'DIFFER'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
