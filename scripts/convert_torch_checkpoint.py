#!/usr/bin/env python3
"""Writes a PyTorch checkpoint's tensors as a safetensors file for mixgrad.

    convert_torch_checkpoint.py IN.pth OUT.safetensors [--dtype float32]
                                [--strip-prefix module.] [--unsafe-pickle]

IN is anything torch.save wrote that holds a state dict:
  - a state dict (model.state_dict(); torchvision's downloaded weights,
    such as ~/.cache/torch/hub/checkpoints/resnet18-f37072fd.pth);
  - a dict with the state dict under "state_dict" or "model" (training
    checkpoints of many scripts);
  - a whole pickled model (torch.save(model)): needs --unsafe-pickle, since
    unpickling it runs code from the file, and the model's classes must be
    importable (torchvision's are).
OUT gets every tensor under its state-dict name, contiguous, on the CPU, in
its own dtype (or floating ones in --dtype), the names in the state dict's
order. Then, in C++:

    auto net = mg::models::resnet18();
    mg::models::load_weights(net, "OUT.safetensors");

Needs only torch and safetensors (pip install torch safetensors).
"""
import argparse
import collections.abc
import os
import sys

USAGE_EXAMPLES = """examples:
  convert_torch_checkpoint.py resnet18-f37072fd.pth resnet18.safetensors
  convert_torch_checkpoint.py ckpt.pth model.safetensors --strip-prefix module.   # from DataParallel
  convert_torch_checkpoint.py whole_model.pt model.safetensors --unsafe-pickle
"""


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="convert_torch_checkpoint.py",
        description="Write the state dict of a torch.save'd checkpoint as safetensors (for mixgrad::models::load_weights).",
        epilog=USAGE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="IN.pth", help="a torch.save'd state dict, a dict holding one under "
                   "'state_dict' or 'model', or a whole pickled model (with --unsafe-pickle)")
    p.add_argument("output", metavar="OUT.safetensors", help="the safetensors file to write")
    p.add_argument("--dtype", choices=["keep", "float32", "float16", "bfloat16"], default="keep",
                   help="cast floating tensors to this dtype (default: keep each tensor's own)")
    p.add_argument("--strip-prefix", default="", metavar="PREFIX",
                   help="remove PREFIX from the names that start with it (e.g. 'module.' of DataParallel)")
    p.add_argument("--unsafe-pickle", action="store_true",
                   help="allow a file that holds more than tensors (a whole model); unpickling runs its code")
    return p.parse_args(argv)


def fail(message):
    print(f"convert_torch_checkpoint.py: {message}", file=sys.stderr)
    sys.exit(1)


def load(path, unsafe_pickle):
    import pickle
    import torch
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's weights-only unpickler refuses classes it does not know.
        if not unsafe_pickle:
            fail(f"{path}: holds more than tensors and plain containers (a whole pickled model?), "
                 f"which only loads by running code from the file; if you trust it, rerun with "
                 f"--unsafe-pickle (torch.load with weights_only=True: {type(e).__name__})")
    except Exception as e:  # noqa: BLE001 (anything torch.load raises on a file that is not a checkpoint)
        fail(f"{path}: not a file torch.save wrote, or damaged ({type(e).__name__}: {e})")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001
        fail(f"{path}: torch.load failed ({type(e).__name__}: {e})")


def find_state_dict(obj, path):
    """The mapping of names to tensors that `obj` is or holds."""
    import torch
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if not isinstance(obj, collections.abc.Mapping):
        fail(f"{path}: holds a {type(obj).__name__}, not a state dict, a model or a dict holding one")
    for key in ("state_dict", "model"):
        if key in obj and not torch.is_tensor(obj[key]):
            return find_state_dict(obj[key], path)
    others = [k for k, v in obj.items() if not torch.is_tensor(v)]
    if others:
        shown = ", ".join(repr(k) for k in others[:8]) + (f" and {len(others) - 8} more" if len(others) > 8 else "")
        fail(f"{path}: a dict whose entries {shown} are not tensors, and with no 'state_dict' or 'model' key")
    return obj


def convert(state_dict, dtype, strip_prefix):
    import torch
    cast = {"keep": None, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    out = {}
    for name, t in state_dict.items():
        if strip_prefix and name.startswith(strip_prefix):
            name = name[len(strip_prefix):]
        if name in out:
            fail(f"two tensors named {name!r} after --strip-prefix {strip_prefix!r}")
        if t.is_quantized or t.is_sparse:
            fail(f"{name!r} is a quantized or sparse tensor, which safetensors does not hold")
        t = t.detach().to("cpu")
        if cast is not None and t.is_floating_point():
            t = t.to(cast)
        # clone: every tensor its own storage (safetensors refuses shared ones).
        out[name] = t.contiguous().clone()
    return out


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch  # noqa: F401
        from safetensors.torch import save_file
    except ImportError as e:
        fail(f"needs torch and safetensors ({e}); pip install torch safetensors")
    if not os.path.isfile(args.input):
        fail(f"{args.input}: no such file")
    tensors = convert(find_state_dict(load(args.input, args.unsafe_pickle), args.input), args.dtype,
                      args.strip_prefix)
    if not tensors:
        fail(f"{args.input}: the state dict is empty")
    save_file(tensors, args.output, metadata={"format": "pt", "source": os.path.basename(args.input)})
    total = sum(t.numel() for t in tensors.values())
    print(f"{args.output}: {len(tensors)} tensors, {total:,} elements, from {args.input}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
