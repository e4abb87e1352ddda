#!/usr/bin/env python3
"""Plot the metrics CSV of train_char_gpt --metrics FILE.csv.

Writes one PNG: the training loss (the mean over each logged interval) and
the validation loss per step, in nats per character, the runs overlaid.
Each run is FILE.csv or LABEL=FILE.csv.

  pip install matplotlib
  python3 scripts/plot_gpt.py "bf16 autocast=runs/gpt.csv" --out docs/images/char_gpt_loss.png
"""
import argparse
import csv
import math
import os

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    steps, train, val_steps, val = [], [], [], []
    with open(path) as f:
        for row in csv.DictReader(f):
            steps.append(int(row["step"]))
            train.append(float(row["loss"]))
            v = float(row["val_loss"])
            if not math.isnan(v):
                val_steps.append(int(row["step"]))
                val.append(v)
    return steps, train, val_steps, val


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="FILE.csv or LABEL=FILE.csv")
    p.add_argument("--out", default="char_gpt_loss.png")
    a = p.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in a.runs:
        label, _, path = run.rpartition("=")
        label = label or os.path.splitext(os.path.basename(path))[0]
        steps, train, val_steps, val = read(path)
        line, = ax.plot(steps, train, label=f"{label}: training")
        ax.plot(val_steps, val, "o--", color=line.get_color(), label=f"{label}: validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / character)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
