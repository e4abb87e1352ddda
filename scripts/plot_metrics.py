#!/usr/bin/env python3
"""Plot the metrics CSVs of train_fashion_mnist --metrics FILE.csv.

Each run is given as FILE.csv (its per-step file; FILE.epochs.csv next to it
is read too) or as LABEL=FILE.csv to name it in the legends (default: the
file's stem). Three PNGs are written to --out:

  loss.png      training loss per step, the runs overlaid (a moving average
                over --smooth steps, the raw values faint behind it)
  scale.png     the GradScaler's scale factor per step, skipped steps marked
  accuracy.png  test accuracy per epoch

  pip install matplotlib
  python3 scripts/plot_metrics.py fp32=runs/fp32.csv "bf16 AMP=runs/amp.csv" --out docs/images
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402


def epochs_path(steps_path):
    """run.csv -> run.epochs.csv, as the C++ side names it."""
    base = steps_path[:-4] if steps_path.endswith(".csv") else steps_path
    return base + ".epochs.csv"


def read_csv(path, required):
    """The columns of a CSV file as lists of floats, keyed by header name."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"plot_metrics: {path} lacks the column(s) {', '.join(missing)}; "
                     "is it a train_fashion_mnist --metrics file?")
        columns = {name: [] for name in reader.fieldnames}
        for row in reader:
            for name, value in row.items():
                columns[name].append(float(value))
    return columns


def load_run(spec):
    label, sep, path = spec.partition("=")
    if not sep:
        label, path = os.path.splitext(os.path.basename(spec))[0], spec
    if not os.path.exists(path):
        sys.exit(f"plot_metrics: no such file: {path}")
    steps = read_csv(path, ["step", "epoch", "loss", "scale_factor", "lr", "skipped"])
    epochs_file = epochs_path(path)
    epochs = read_csv(epochs_file, ["epoch", "test_accuracy"]) if os.path.exists(epochs_file) else None
    return {"label": label, "steps": steps, "epochs": epochs}


def moving_average(values, window):
    if window <= 1:
        return list(values)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_loss(runs, smooth, out):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, run in enumerate(runs):
        color = f"C{i}"
        s = run["steps"]
        ax.plot(s["step"], s["loss"], color=color, alpha=0.2, linewidth=0.6)
        ax.plot(s["step"], moving_average(s["loss"], smooth), color=color, linewidth=1.6,
                label=f"{run['label']} (mean of {smooth} steps)")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (cross entropy)")
    ax.set_title("Training loss")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_scale(runs, out):
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, run in enumerate(runs):
        color = f"C{i}"
        s = run["steps"]
        if all(v == 1.0 for v in s["scale_factor"]) and not any(s["skipped"]):
            continue  # a run without a GradScaler (its CSV says scale 1 throughout)
        ax.step(s["step"], s["scale_factor"], where="post", color=color, label=run["label"])
        skipped = [(st, sc) for st, sc, sk in zip(s["step"], s["scale_factor"], s["skipped"]) if sk]
        if skipped:
            xs, ys = zip(*skipped)
            ax.scatter(xs, ys, marker="x", color=color, zorder=3,
                       label=f"{run['label']}: {len(skipped)} skipped step(s)")
    if not ax.lines:
        ax.text(0.5, 0.5, "no run used a GradScaler", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.set_yscale("log", base=2)
        ax.legend()
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss scale factor")
    ax.set_title("GradScaler scale factor (x: step skipped for inf / NaN gradients)")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_accuracy(runs, out):
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, run in enumerate(runs):
        e = run["epochs"]
        if not e:
            continue
        acc = [100.0 * a for a in e["test_accuracy"]]
        ax.plot(e["epoch"], acc, marker="o", color=f"C{i}", label=f"{run['label']} (final {acc[-1]:.2f} %)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Test accuracy per epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="[LABEL=]FILE.csv", help="per-step metrics files")
    parser.add_argument("--out", default=".", help="directory for the PNGs (default: .)")
    parser.add_argument("--prefix", default="", help="prepended to the PNG names, e.g. cnn_")
    parser.add_argument("--smooth", type=int, default=25, help="moving-average window of the loss (steps)")
    args = parser.parse_args()

    runs = [load_run(spec) for spec in args.runs]
    os.makedirs(args.out, exist_ok=True)
    outputs = {name: os.path.join(args.out, args.prefix + name) for name in ("loss.png", "scale.png", "accuracy.png")}
    plot_loss(runs, max(args.smooth, 1), outputs["loss.png"])
    plot_scale(runs, outputs["scale.png"])
    plot_accuracy(runs, outputs["accuracy.png"])
    for path in outputs.values():
        print(path)


if __name__ == "__main__":
    main()
