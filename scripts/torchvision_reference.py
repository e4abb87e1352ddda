#!/usr/bin/env python3
"""torchvision's logits on torchvision's random weights, for mixgrad's logit test.

    torchvision_reference.py OUTDIR [--arch resnet18 ...] [--batch 2] [--size 224]

For each architecture (vgg16, vgg16_bn, resnet18, resnet50 by default) it
builds torchvision.models.<arch>(weights=None) after torch.manual_seed(seed);
gives its BatchNorm2d layers the running statistics of two training-mode
passes over random images and random affine parameters (torchvision's init
leaves them at 0, 1, 1, 0, which would hide a mix-up of any two, and with
such statistics ResNet-50's logits reach the thousands); and writes, in OUTDIR:
  <arch>.safetensors     the state dict, saved by torch.save and converted
                         by convert_torch_checkpoint.py (the .pth is then
                         removed: VGG-16's is 550 MB);
  <arch>.io.safetensors  "input" [batch, 3, size, size] (a fixed random
                         image batch) and "logits", the model's output on it
                         in eval mode, float32.
For resnet18 it also converts the state dict saved inside a training
checkpoint's dict and as a whole pickled model, which must give the same
tensors (and the latter must be refused without --unsafe-pickle); it fails
otherwise.
Exits 77 (skipped) when torch, torchvision or safetensors is missing.
"""
import argparse
import os
import sys
import time

try:
    import torch
    import torchvision
    from safetensors.torch import save_file
except ImportError as e:
    print(f"skipped: torch, torchvision or safetensors not installed ({e}); "
          f"pip install torch torchvision safetensors")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert_torch_checkpoint  # noqa: E402

ARCHS = ["vgg16", "vgg16_bn", "resnet18", "resnet50"]


def calibrate_batch_norms(model, batch, size, generator):
    """Running statistics from two training-mode passes over random images
    (cumulative averages, as torch's momentum=None), then random affine
    parameters: values that show a mix-up of any two of them."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    if not norms:
        return
    for m in norms:
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.empty(batch, 3, size, size).normal_(generator=generator))
        for m in norms:
            c = m.num_features
            m.weight.copy_(torch.empty(c).uniform_(0.5, 1.5, generator=generator))
            m.bias.copy_(torch.empty(c).normal_(0.0, 0.1, generator=generator))


def check_convert_forms(model, outdir, arch):
    """The convert script's other inputs give the same file: a dict holding
    the state dict under "model" beside other entries, and a whole pickled
    model, which it refuses without --unsafe-pickle."""
    from safetensors.torch import load_file
    want = load_file(os.path.join(outdir, arch + ".safetensors"))
    wrapped = os.path.join(outdir, arch + ".wrapped.pth")
    torch.save({"model": model.state_dict(), "epoch": 3, "optimizer": {"lr": 0.1}}, wrapped)
    whole = os.path.join(outdir, arch + ".whole.pt")
    torch.save(model, whole)
    print("convert_torch_checkpoint.py must refuse a whole model without --unsafe-pickle:", flush=True)
    try:
        convert_torch_checkpoint.main([whole, os.path.join(outdir, "refused.safetensors")])
        raise SystemExit("convert_torch_checkpoint.py converted a whole model without --unsafe-pickle")
    except SystemExit as e:
        if e.code != 1:
            raise
    for source, extra in ((wrapped, []), (whole, ["--unsafe-pickle"])):
        out = source + ".safetensors"
        convert_torch_checkpoint.main([source, out] + extra)
        got = load_file(out)
        if list(got) != list(want) or any(not torch.equal(got[k], want[k]) for k in want):
            raise SystemExit(f"{out}: not the tensors of {arch}.safetensors")
        for path in (source, out):
            os.remove(path)


def write_reference(arch, outdir, batch, size, seed):
    torch.manual_seed(seed)
    model = getattr(torchvision.models, arch)(weights=None)
    calibrate_batch_norms(model, batch, size, torch.Generator().manual_seed(seed + 1))
    model.eval()
    pth = os.path.join(outdir, arch + ".pth")
    torch.save(model.state_dict(), pth)
    convert_torch_checkpoint.main([pth, os.path.join(outdir, arch + ".safetensors")])
    if arch == "resnet18":
        check_convert_forms(model, outdir, arch)
    os.remove(pth)
    x = torch.empty(batch, 3, size, size).normal_(generator=torch.Generator().manual_seed(seed + 2))
    with torch.no_grad():
        logits = model(x)
    save_file({"input": x.contiguous(), "logits": logits.contiguous()},
              os.path.join(outdir, arch + ".io.safetensors"))
    return float(logits.abs().max())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("outdir")
    p.add_argument("--arch", action="append", choices=ARCHS, help="repeatable; default: all four")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
    for arch in args.arch or ARCHS:
        start = time.time()
        scale = write_reference(arch, args.outdir, args.batch, args.size, args.seed)
        print(f"{arch}: max |logit| {scale:.4g}, {time.time() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
