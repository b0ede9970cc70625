#!/usr/bin/env python3
"""Alpha-beta model of ring all-reduce, fitted to scaling.sh's measurements, projected to
64-1024 ranks. usage: model.py OUTDIR RATE

Per series (Open MPI ring, ccoll none, maxnorm:bits=B), time for n bytes on p ranks:
    t = a * 2(p-1)  +  n * 2(p-1)/p * 8 / (R * ratio(p))  +  g * n * max(1, p / cores)
a: per-step latency; the middle term: the ring's wire bytes at link rate R (ratio(p) computed
from the lane widths: reduce-scatter step j carries bits_for(2 j s)-bit lanes, the all-gather
carries the p-contribution width); g: the series' CPU time per input byte (encode, adds,
decode, copies), multiplied by the ranks per core on the measuring machine. a and g are fitted
(least squares, non-negative); the projection gives every rank its own core.

Hierarchical all-reduce (algorithm=hierarchical), L ranks per node and N nodes (p = L N), the
L cross-node all-reduces of a node sharing its one link at rate R, the node's own steps at
B bytes/s per rank (shared memory or NVLink):
    flat:          a 2(p-1) + n 2(p-1)/p 8 / (R ratio(p)) + g n
    hierarchical:  2 n (L-1)/L / B + a 2(N-1) + n 2(N-1)/N 8 / (R ratio_nodes(N, L)) + g n / L
(the flat ring's step time is its one cross-node hop per node; the hierarchical schedule's
codec works on a shard of n/L, and maxnorm encodes each node's sum into the lanes of L
contributions, so its reduce-scatter step j carries bits_for(2 j L s)-bit lanes and its
all-gather the p-contribution width). Pipelined in S
segments (MPI_THREAD_MULTIPLE: the node's steps of one segment run during another's
cross-node step), with node = 2 n (L-1)/L / B and cross = S a 2(N-1) + the wire and codec terms:
    pipelined:     max(node, cross) + min(node, cross) / S"""
import glob
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def rate_bps(rate):
    m = re.fullmatch(r"(\d+)(bit|kbit|mbit|gbit)", rate)
    return int(m.group(1)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]


def bits_for(v):
    return max(1, int(v).bit_length())


def ratio(series, p):
    m = re.fullmatch(r"maxnorm:bits=(\d)", series)
    if not m or p == 1:
        return 1.0
    s = 2 ** (int(m.group(1)) - 1) - 1
    rs = sum(bits_for(2 * j * s) for j in range(1, p))
    ag = (p - 1) * bits_for(2 * p * s)
    return 32.0 * 2 * (p - 1) / (rs + ag)


def ratio_nodes(series, N, L):
    """ratio() of the cross-node ring of a hierarchical all-reduce: N nodes whose payloads each
    hold a node sum encoded as L contributions."""
    m = re.fullmatch(r"maxnorm:bits=(\d)", series)
    if not m or N == 1:
        return 1.0
    s = 2 ** (int(m.group(1)) - 1) - 1
    rs = sum(bits_for(2 * j * L * s) for j in range(1, N))
    ag = (N - 1) * bits_for(2 * N * L * s)
    return 32.0 * 2 * (N - 1) / (rs + ag)


def load(raw):
    pts = {}  # series -> list of (p, n, seconds)
    for d in sorted(glob.glob(os.path.join(raw, "*hosts"))):
        p = int(re.search(r"(\d+)hosts", d).group(1))
        for path in glob.glob(os.path.join(d, "*.txt")):
            stem = os.path.basename(path)[:-4]
            for line in open(path):
                f = line.split()
                if line.startswith("#") or len(f) < 7 or not f[0].isdigit():
                    continue
                series = stem if f[1] == "MPI" else f[1]
                pts.setdefault(series, []).append((p, int(f[0]), float(f[2]) * 1e-6))
    return pts


# tbf lets a burst of 10 ms at the rate pass unshaped, so transfers below a few MiB beat the
# link term; the fit uses the sizes where the shaped rate holds.
MIN_FIT_BYTES = 4 << 20


def fit(series, pts, R, cores):
    pts = [x for x in pts if x[1] >= MIN_FIT_BYTES]
    X, y = [], []
    for p, n, t in pts:
        link = n * 2 * (p - 1) / p * 8 / (R * ratio(series, p))
        X.append([2 * (p - 1), n * max(1.0, p / cores)])
        y.append(t - link)
    # relative least squares: each point weighs 1/t, so 64 KiB counts as much as 64 MiB
    w = 1.0 / np.array([t for _, _, t in pts])
    X, y = np.array(X) * w[:, None], np.array(y) * w
    a, g = np.linalg.lstsq(X, y, rcond=None)[0]
    if a < 0:  # non-negative: drop the negative term and refit the other
        a, g = 0.0, max(0.0, float(np.linalg.lstsq(X[:, 1:], y, rcond=None)[0][0]))
    if g < 0:
        g, a = 0.0, max(0.0, float(np.linalg.lstsq(X[:, :1], y, rcond=None)[0][0]))
    return float(a), float(g)


def predict(series, a, g, p, n, R, per_core):
    return (a * 2 * (p - 1) + n * 2 * (p - 1) / p * 8 / (R * ratio(series, p))
            + g * n * max(1.0, per_core))


# The node's own steps: per-rank bandwidth of an intra-node reduce-scatter or all-gather.
INTRA_BPS = {"shared memory": 20e9, "NVLink": 200e9}
# A GPU's codec time per input byte: maxnorm:bits=8 on an H100 encodes at about 520 GB/s and
# decode-accumulates at about 330 GB/s (bench/results/gpu/), once each per byte on the ring.
GPU_G = 1 / 520e9 + 1 / 330e9


def predict_flat(series, a, g, L, N, n, R):
    p = L * N
    return a * 2 * (p - 1) + n * 2 * (p - 1) / p * 8 / (R * ratio(series, p)) + g * n


def predict_hierarchical(series, a, g, L, N, n, R, B, segments=1):
    node = 2 * n * (L - 1) / L / B
    cross = (segments * a * 2 * (N - 1) + n * 2 * (N - 1) / N * 8 / (R * ratio_nodes(series, N, L))
             + g * n / L)
    if segments == 1:
        return node + cross
    return max(node, cross) + min(node, cross) / segments


# ccoll's segments for a pipelined hierarchical all-reduce: one per 8 MiB, at most 8.
def pipeline_segments(n):
    return max(1, min(8, n // (8 << 20)))


def hierarchical_section(order, params):
    n = 64 << 20
    L = 8
    nodes = [8, 16, 32, 64, 128]
    md = ["", "## Projection: hierarchical against flat, 8 ranks per node, 64 MiB (ms)", "",
          "`flat / hier / pipelined` per node count (pipelined: the levels overlapped in",
          f"{pipeline_segments(n)} segments, as under MPI_THREAD_MULTIPLE on host buffers; on device",
          "buffers ccoll does not pipeline them, so the GPU rows' third number is a what-if); codec time per byte `g` as fitted on this machine's CPU",
          "(\"CPU\") or an H100's maxnorm kernels (\"GPU\", `bench/results/gpu/`); the node's",
          "own steps at " + ", ".join(f"{k} {v / 1e9:.0f} GB/s" for k, v in INTRA_BPS.items()) +
          " per rank; maxnorm's node sums travel in the lanes of 8 contributions (for an error",
          "the flat ring's over sqrt(8)). A model, not a measurement: see",
          "bench/results/hierarchical/ for what 2 and 4 hosts on the test network gave.", "",
          "| link | inside the node | series, codec on | " +
          " | ".join(f"{N} nodes" for N in nodes) + " |",
          "|---|---|---|" + "---|" * len(nodes)]
    for gbit in (10, 100):
        R = gbit * 1e9
        for where, B in INTRA_BPS.items():
            for s in order:
                if s == "mpi-ring":
                    continue
                a, g = params[s]
                for dev, gg in (("CPU", g), ("GPU", GPU_G if s.startswith("maxnorm") else g)):
                    if dev == "GPU" and not s.startswith("maxnorm"):
                        continue
                    cells = []
                    for N in nodes:
                        f = predict_flat(s, a, gg, L, N, n, R)
                        h = predict_hierarchical(s, a, gg, L, N, n, R, B)
                        hp = predict_hierarchical(s, a, gg, L, N, n, R, B, pipeline_segments(n))
                        cells.append(f"{f * 1e3:.0f} / {h * 1e3:.0f} / {hp * 1e3:.0f}")
                    md.append(f"| {gbit} Gbit/s | {where} | `{s}`, {dev} | " + " | ".join(cells) +
                              " |")
    return md


def main():
    out, rate = sys.argv[1], sys.argv[2]
    R = rate_bps(rate)
    meta = open(os.path.join(out, "raw", "meta.txt")).read().strip()
    cores = int(re.search(r"cores: (\d+)", meta).group(1))
    pts = load(os.path.join(out, "raw"))
    order = [s for s in ("mpi-ring", "none", "maxnorm:bits=8", "maxnorm:bits=4") if s in pts]
    md = ["# Scaling with hosts, and an alpha-beta model", "",
          "Generated by `bench/sweep/model.py` from `raw/` (written by `bench/sweep/scaling.sh`).",
          "Model (per series): `t = a·2(p−1) + n·2(p−1)/p·8/(R·ratio(p)) + g·n·max(1, p/cores)`;",
          "`a` and `g` fitted to every measured (hosts, size) by relative least squares, `ratio(p)` from the lane widths,",
          "`R` the link rate. The projection gives every rank its own core (`g·n`). Only sizes of",
          "4 MiB and more enter the fit: `tc tbf` passes a 10 ms burst unshaped, so smaller",
          "transfers beat the link term.", "",
          "```", meta, "```", "",
          f"## Fit at {rate} (measured hosts: " + ", ".join(sorted({str(p) for s in pts for p, _, _ in pts[s]}, key=int)) + ")", "",
          "| series | a (us per step) | g (ns per byte) | worst fit error (sizes >= 4 MiB) | ratio at 4 / 64 / 1024 ranks |",
          "|---|---|---|---|---|"]
    params = {}
    for s in order:
        a, g = fit(s, pts[s], R, cores)
        params[s] = (a, g)
        worst = max(abs(predict(s, a, g, p, n, R, p / cores) - t) / t
                    for p, n, t in pts[s] if n >= MIN_FIT_BYTES)
        md.append(f"| `{s}` | {a * 1e6:.1f} | {g * 1e9:.3f} | {100 * worst:.0f}% | "
                  f"{ratio(s, 4):.2f} / {ratio(s, 64):.2f} / {ratio(s, 1024):.2f} |")
    n = 64 << 20
    ranks = [64, 128, 256, 512, 1024]
    md += ["", "## Projection: 64 MiB float sum per all-reduce (ms), one core per rank", "",
           "| link | series | " + " | ".join(f"{p} ranks" for p in ranks) + " |",
           "|---|---|" + "---|" * len(ranks)]
    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    for ax, gbit in zip(axes[1:], (10, 100)):
        Rp = gbit * 1e9
        for s in order:
            a, g = params[s]
            ts = [predict(s, a, g, p, n, Rp, 1) for p in ranks]
            md.append(f"| {gbit} Gbit/s | `{s}` | " + " | ".join(f"{t * 1e3:.0f}" for t in ts) + " |")
            xs = [2 ** k for k in range(1, 11)]
            ax.plot(xs, [predict(s, a, g, p, n, Rp, 1) * 1e3 for p in xs], marker=".", label=s)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"projected, 64 MiB, {gbit} Gbit/s links")
        ax.set_xlabel("ranks")
        ax.set_ylabel("ms per all-reduce")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for s in order:
        a, g = params[s]
        meas = sorted((p, t) for p, nn, t in pts[s] if nn == max(x[1] for x in pts[s]))
        line = axes[0].plot([p for p, _ in meas], [t * 1e3 for _, t in meas], "o", label=f"{s} measured")
        xs = sorted({p for p, _ in meas})
        nmax = max(x[1] for x in pts[s])
        axes[0].plot(xs, [predict(s, a, g, p, nmax, R, p / cores) * 1e3 for p in xs], "-",
                     color=line[0].get_color(), label=f"{s} model")
    axes[0].set_title(f"measured vs model, {rate}, largest size")
    axes[0].set_xlabel("hosts")
    axes[0].set_ylabel("ms per all-reduce")
    axes[0].grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "model.png"), dpi=90)
    md += ["", "![model](model.png)"]
    md += hierarchical_section(order, params) + [""]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"model: wrote {out}/README.md and model.png")


if __name__ == "__main__":
    main()
