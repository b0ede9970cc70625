#!/usr/bin/env python3
"""Writes OUTDIR/README.md (tables per task, claims checked against the measurements) and
OUTDIR/convergence-TASK.png from OUTDIR/raw/TASK-sSEED.jsonl, as bench/convergence/run.sh
leaves them."""
import glob
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SETS = [
    ("sgd/grad/", "A. Momentum SGD, gradients averaged", "sgd/grad/none"),
    ("sgd/momentum/", "B. Momentum SGD, each rank's momentum buffer averaged", "sgd/momentum/none"),
    ("adam/", "C. Adam and quantized Adam with error feedback", "adam/none"),
    ("adamw/grad/", "D. AdamW, the gradients averaged by the DDP hook", "adamw/grad/none"),
]
TASKS = {
    "mnist": "MNIST (t10k: 8,000 images train, 2,000 test)",
    "fashion": "Fashion-MNIST (t10k: 8,000 images train, 2,000 test; Debian's "
               "dataset-fashion-mnist)",
    "text": "Text (Debian's fortunes, bytes: a 2-block transformer predicts the next byte; "
            "accuracy = next-byte accuracy on held-out entries)",
}
GRAD = ("sgd/grad/", "adamw/grad/")  # the sets that average gradients, one per task


def load(out):
    """{task: {label: [run per seed, in seed order]}}"""
    tasks = {}
    for path in sorted(glob.glob(os.path.join(out, "raw", "*-s*.jsonl"))):
        m = re.match(r"(.+)-s(\d+)\.jsonl$", os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    tasks.setdefault(m.group(1), {}).setdefault(r["label"], []).append(r)
    for runs in tasks.values():
        for v in runs.values():
            v.sort(key=lambda r: r.get("seed", 0))
    return tasks


def mean(runs, key):
    return statistics.mean(r[key] for r in runs)


def verdict(ok):
    return "**holds**" if ok else "**does not hold**"


def in_set(label, prefix):
    return label.startswith(prefix) or (prefix == "adam/" and label.startswith("qadam/"))


def ordered(tasks):
    """The task names in TASKS' order, others after."""
    return sorted(tasks, key=lambda t: list(TASKS).index(t) if t in TASKS else 99)


def grad_prefix(runs):
    """The label prefix of the task's gradient set (A or D) that has an uncompressed run."""
    return next((p for p in GRAD if p + "none" in runs), None)


def spread(rs):
    """Accuracy points between the best and the worst seed."""
    return max(r["final_accuracy"] for r in rs) - min(r["final_accuracy"] for r in rs)


def opt(rs, key, fmt):
    """`fmt` of the mean of `key`, or "-" where the runs do not report it."""
    return format(mean(rs, key), fmt) if all(key in r for r in rs) else "-"


def table(runs, prefix, base):
    md = ["| run | test acc. (%), mean | per seed | Δ vs uncompressed | test loss | "
          "final train loss | bits/elem (grad) | bits/elem (weights) | wire MB | rel. error | "
          "mean codec bits |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    b = runs.get(base)
    for label, rs in runs.items():
        if not in_set(label, prefix):
            continue
        acc = mean(rs, "final_accuracy")
        d = f"{acc - mean(b, 'final_accuracy'):+.2f}" if b else "-"
        seeds = " / ".join(f"{r['final_accuracy']:.2f}" for r in rs)
        wb = f"{mean(rs, 'weight_bits_per_element'):.2f}" if rs[0]["optimizer"] == "qadam" else "-"
        md.append(f"| `{label}` | {acc:.2f} | {seeds} | {d} | "
                  f"{opt(rs, 'final_test_loss', '.4f')} | {mean(rs, 'final_loss'):.4f} | "
                  f"{mean(rs, 'grad_bits_per_element'):.2f} | {wb} | "
                  f"{mean(rs, 'wire_bytes') / 1e6:.1f} | {mean(rs, 'relative_error'):.3g} | "
                  f"{opt(rs, 'mean_codec_bits', '.2f')} |")
    return md + [""]


def claims(runs):
    """The claims, each with its rule and numbers; judged on the means over the seeds."""
    md = []
    have = lambda *ls: all(x in runs for x in ls)  # noqa: E731
    acc = {k: mean(v, "final_accuracy") for k, v in runs.items()}
    bits = {k: mean(v, "grad_bits_per_element") for k, v in runs.items()}
    err = {k: mean(v, "relative_error") for k, v in runs.items()}
    loss = {k: mean(v, "final_loss") for k, v in runs.items()}
    loss_t = lambda k: opt(runs[k], "final_test_loss", ".4f")  # noqa: E731
    g = grad_prefix(runs) or GRAD[0]
    if have(g + "none"):
        md.append(f"- Noise: uncompressed training's accuracy differs by "
                  f"{spread(runs[g + 'none']):.2f} "
                  f"points between seeds ({len(runs[g + 'none'])} seeds).")
    if have(g + "none", g + "maxnorm:bits=8"):
        d = acc[g + "maxnorm:bits=8"] - acc[g + "none"]
        md.append(f"- `maxnorm:bits=8` within 0.5 points of uncompressed: {d:+.2f} points, "
                  f"{verdict(d >= -0.5)}.")
    if have(g + "none", g + "maxnorm:bits=4,ef=1"):
        d = acc[g + "maxnorm:bits=4,ef=1"] - acc[g + "none"]
        md.append(f"- `maxnorm:bits=4,ef=1` within 1 point: {d:+.2f} points, {verdict(d >= -1)}.")
    if have(g + "maxnorm:bits=2", g + "maxnorm:bits=2,ef=1"):
        e, m = acc[g + "maxnorm:bits=2,ef=1"], acc[g + "maxnorm:bits=2"]
        line = (f"- `maxnorm:bits=2,ef=1` at least as accurate as `maxnorm:bits=2`: {e:.2f}% vs "
                f"{m:.2f}%, {verdict(e >= m)} (test loss {loss_t(g + 'maxnorm:bits=2,ef=1')} vs "
                f"{loss_t(g + 'maxnorm:bits=2')})")
        s = g + "maxnorm:bits=2,round=stochastic,ef=1"
        if have(s):
            line += (f" (with the stochastic rounding that ef=1 replaced: {acc[s]:.2f}%, final "
                     f"train loss {loss[s]:.4f})")
        md.append(line + ".")
    b, w = g + "maxnorm:bits=2", g + "maxnorm:bits=2,block=65536"
    for x, y in ((b, w), (b + ",ef=1", w + ",ef=1")):
        if have(x, y):
            md.append(f"- Scale blocks of 1024 elements (the default) against 65536 at 2 bits: "
                      f"`{x[len(g):]}` {acc[x]:.2f}% (relative error {err[x]:.3g}, "
                      f"{bits[x]:.2f} bits/elem) vs `{y[len(g):]}` {acc[y]:.2f}% ({err[y]:.3g}, "
                      f"{bits[y]:.2f}), {verdict(acc[x] >= acc[y])} (at least as accurate).")
    if have(g + "maxnorm:bits=3,ef=21", g + "maxnorm:bits=3"):
        e, m = acc[g + "maxnorm:bits=3,ef=21"], acc[g + "maxnorm:bits=3"]
        md.append(f"- EF21 at 3 bits: `maxnorm:bits=3,ef=21` {e:.2f}% vs `maxnorm:bits=3` "
                  f"{m:.2f}%, {verdict(e >= m)} (at least as accurate).")
    if have(g + "sketch:bits=2", g + "maxnorm:bits=3"):
        a, m = acc[g + "sketch:bits=2"], acc[g + "maxnorm:bits=3"]
        line = (f"- CASQ: `sketch:bits=2` at least as accurate as `maxnorm:bits=3`: {a:.2f}% at "
                f"{bits[g + 'sketch:bits=2']:.2f} bits/elem vs {m:.2f}% at "
                f"{bits[g + 'maxnorm:bits=3']:.2f}, {verdict(a >= m)}; relative error of the "
                f"average {err[g + 'sketch:bits=2']:.3g} vs {err[g + 'maxnorm:bits=3']:.3g}")
        ab = g + "sketch:bits=2,zero=0,refine=0"
        if have(ab):
            line += (f". The cluster-aware allocation alone (`zero=0,refine=0`, CASQ's method "
                     f"without ccoll's two additions): {acc[ab]:.2f}%, relative error "
                     f"{err[ab]:.3g}")
        md.append(line + ".")
    if have(g + "maxnorm:bits=3/7", g + "maxnorm:bits=3"):
        t, m = acc[g + "maxnorm:bits=3/7"], acc[g + "maxnorm:bits=3"]
        md.append(f"- Two-scale (the reference's 2/6, ccoll's `bits=3/7`) against single-scale "
                  f"at the same code width (`bits=3`): {t:.2f}% at {bits[g + 'maxnorm:bits=3/7']:.2f}"
                  f" bits/elem vs {m:.2f}% at {bits[g + 'maxnorm:bits=3']:.2f}; relative error "
                  f"{err[g + 'maxnorm:bits=3/7']:.3g} vs {err[g + 'maxnorm:bits=3']:.3g}, "
                  f"{verdict(err[g + 'maxnorm:bits=3/7'] < err[g + 'maxnorm:bits=3'])} (lower "
                  f"error).")
    m_ = "sgd/momentum/"
    # temporal at its default 65536-element blocks, then at maxnorm's default 1024
    rows = [(b_, "", "65536-element blocks; maxnorm 1024") for b_ in (8, 6, 4, 3, 2)]
    rows += [(b_, ",block=1024", "both 1024-element blocks") for b_ in (4, 3, 2)]
    for b_, blk, note in rows:
        t, m = f"{m_}temporal:bits={b_}{blk}", f"{m_}maxnorm:bits={b_}"
        if have(t, m):
            md.append(f"- `temporal:bits={b_}{blk}` lower reconstruction error than "
                      f"`maxnorm:bits={b_}` on momentum vectors ({note}): {err[t]:.3g} vs "
                      f"{err[m]:.3g}, {verdict(err[t] < err[m])}; accuracy {acc[t]:.2f}% vs "
                      f"{acc[m]:.2f}%.")
    t, u, m = m_ + "temporal:bits=2", m_ + "temporal:bits=2,shrink=0", m_ + "maxnorm:bits=2"
    if have(t, u, m):
        md.append(f"- The width-shrunk predictor (default) against the momentum coefficient itself "
                  f"(`shrink=0`) at 2 bits: error {err[t]:.3g} vs {err[u]:.3g} (maxnorm "
                  f"{err[m]:.3g}), {verdict(err[t] < err[u])}; accuracy {acc[t]:.2f}% vs "
                  f"{acc[u]:.2f}%.")
    if have(m_ + "temporal:bits=3", m_ + "maxnorm:bits=4"):
        t, m = m_ + "temporal:bits=3", m_ + "maxnorm:bits=4"
        ok = acc[t] >= acc[m] - 0.25 and bits[t] < bits[m]
        md.append(f"- `temporal` equal accuracy with fewer bits (rule: within 0.25 points with "
                  f"fewer bits/elem): `temporal:bits=3` {acc[t]:.2f}% at {bits[t]:.2f} bits vs "
                  f"`maxnorm:bits=4` {acc[m]:.2f}% at {bits[m]:.2f} bits, {verdict(ok)}.")
    fixed = [k for k in runs if re.fullmatch(re.escape(g) + r"maxnorm:bits=\d", k)]
    for dq in [k for k in runs if k.startswith(g + "dq:")]:
        matched = [k for k in fixed if acc[dq] >= acc[k] - 0.25]
        if not matched:
            md.append(f"- `{dq[len(g):]}`: {acc[dq]:.2f}% is below every fixed-width run; "
                      f"{verdict(False)}.")
            continue
        best = max(matched, key=lambda k: acc[k])
        md.append(f"- `{dq[len(g):]}` fewer total bits than the fixed-width run it matches in "
                  f"accuracy (rule: the most accurate fixed `maxnorm` run within 0.25 points of "
                  f"it, `{best[len(g):]}`, {acc[best]:.2f}% at {bits[best]:.2f} bits/elem): dq "
                  f"{acc[dq]:.2f}% at {bits[dq]:.2f} bits/elem (mean width "
                  f"{opt(runs[dq], 'mean_codec_bits', '.2f')}), {verdict(bits[dq] < bits[best])}."
                  + ("" if "bits_per_epoch" not in runs[dq][0] else " Width per epoch (first "
                     "seed): " + " ".join(f"{b:.1f}" for b in runs[dq][0]["bits_per_epoch"]) +
                     "."))
    for q in [k for k in runs if k.startswith("qadam/maxnorm")]:
        if have("adam/none"):
            d = acc[q] - acc["adam/none"]
            md.append(f"- Quantized Adam `{q[6:]}` within 1 point of uncompressed Adam: "
                      f"{d:+.2f} points, {verdict(d >= -1)}.")
    sweep = sorted(k for k in runs if k.startswith("qadam/none+w:"))
    if sweep and have("adam/none"):
        md.append(f"- Quantized Adam, weights only (gradients exact), the loss floor against the "
                  f"weights' quantization (uncompressed Adam: final train loss "
                  f"{loss['adam/none']:.4f}, {acc['adam/none']:.2f}%): " + "; ".join(
                      f"`{k[13:]}` {loss[k]:.4f} ({acc[k]:.2f}%)" for k in sweep) + ".")
    return md + [""]


def summary(tasks):
    """One row per codec of the gradient sets (A, D): each task's accuracy and test loss against
    its uncompressed run, so that the codecs compare across tasks."""
    grad = {t: grad_prefix(tasks[t]) for t in ordered(tasks)}
    order = [t for t in ordered(tasks) if grad[t]]
    codecs = []
    for t in order:
        for label in tasks[t]:
            c = label[len(grad[t]):] if label.startswith(grad[t]) else None
            if c and c != "none" and c not in codecs:
                codecs.append(c)
    head = "| codec | " + " | ".join(f"{t}: Δ acc. (points) | {t}: Δ test loss" for t in order)
    md = [head + " | bits/elem |", "|---|" + "---|---|" * len(order) + "---|"]
    md.append("| (uncompressed: spread between seeds) | " + " | ".join(
        f"±{spread(tasks[t][grad[t] + 'none']):.2f} | -" for t in order) + " | 32 |")
    for c in codecs:
        cells, bits = [], "-"
        for t in order:
            runs = tasks[t]
            label, base = grad[t] + c, runs[grad[t] + "none"]
            if label not in runs:
                cells.append("- | -")
                continue
            rs = runs[label]
            d = mean(rs, "final_accuracy") - mean(base, "final_accuracy")
            lt = (f"{mean(rs, 'final_test_loss') - mean(base, 'final_test_loss'):+.3f}"
                  if all("final_test_loss" in r for r in rs + base) else "-")
            cells.append(f"{d:+.2f} | {lt}")
            if bits == "-":
                bits = f"{mean(rs, 'grad_bits_per_element'):.2f}"
        md.append(f"| `{c}` | " + " | ".join(cells) + f" | {bits} |")
    return md + [""]


def plot(runs, out, task):
    sets = [s for s in SETS if any(in_set(label, s[0]) for label in runs)]
    fig, axes = plt.subplots(2, len(sets), figsize=(6 * len(sets), 9), squeeze=False)
    for col, (prefix, title, _) in enumerate(sets):
        for label, rs in runs.items():
            if not in_set(label, prefix):
                continue
            r = rs[0]
            ep = list(range(1, len(r["loss"]) + 1))
            style = "--" if label.endswith("/none") else "-"
            name = label.split("/", 2)[-1] if not label.startswith("qadam") else label
            axes[0][col].plot(ep, r["loss"], style, marker=".", label=name)
            axes[1][col].plot(ep, r["accuracy"], style, marker=".", label=name)
        axes[0][col].set_title(f"{task}: {title} (first seed)", fontsize=9)
        axes[0][col].set_yscale("log")
        axes[0][col].set_ylabel("train loss")
        axes[1][col].set_ylabel("test accuracy (%)")
        for row in (0, 1):
            axes[row][col].set_xlabel("epoch" if prefix != "adamw/grad/" else
                                      "evaluation (every 40 steps)")
            axes[row][col].grid(True, alpha=0.3)
            axes[row][col].legend(fontsize=5)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"convergence-{task}.png"), dpi=70)
    plt.close(fig)


def main():
    out = sys.argv[1]
    tasks = load(out)
    meta = open(os.path.join(out, "raw", "meta.txt")).read().strip()
    all_runs = [rs[0] for t in tasks.values() for rs in t.values()]
    any_run = next((r for r in all_runs if r.get("model", "mlp") == "mlp"), all_runs[0])
    md = ["# Convergence of data-parallel training with each codec", "",
          "Generated by `bench/convergence/report.py` from `raw/TASK-sSEED.jsonl`, written by "
          "`bench/convergence/run.sh` (command and machine below). Sets A-C: the same MLP "
          f"({any_run['params']} parameters, one hidden layer of 128) on each image task; set D: "
          "a byte-level transformer (two pre-LayerNorm blocks of width 64, 4 heads; "
          "bench/convergence/text_transformer.py) trained with AdamW for 400 steps through "
          "PyTorch DDP and ccoll's hook, which averages 1-D parameters (biases, LayerNorm) "
          "exactly; "
          f"{any_run['ranks']} ranks; "
          "per seed the same initialization and data order for every codec. Accuracy is the mean "
          "over the seeds (each seed's value beside it); the claims are judged on the means. "
          "*bits/elem* = bits on the wire per element an all-reduce moves (32 = uncompressed "
          "fp32; summable codecs' lanes widen as they add up, so `maxnorm:bits=8` over 4 ranks "
          "sends ~9.5); *rel. error* = ||average − exact average|| / ||exact average|| over all "
          "steps (exact: a separate plain MPI_Allreduce, not counted in the bytes).", "",
          "```", meta, "```", ""]
    md += ["# Summary: the gradient codecs on every task", "",
           "Mean over the seeds against the task's uncompressed run (MLP tasks: momentum SGD, "
           "set A; text: AdamW through the DDP hook, set D). *bits/elem*: the first task's (the "
           "text task's count includes the exact 1-D parameters).", ""] + summary(tasks)
    for task in ordered(tasks):
        runs = tasks[task]
        md += [f"# Task: {TASKS.get(task, task)}", ""]
        for prefix, title, base in SETS:
            if any(in_set(label, prefix) for label in runs):
                md += [f"## {task}: {title}", ""] + table(runs, prefix, base)
        md += [f"## {task}: the claims, checked", ""] + claims(runs)
        plot(runs, out, task)
        md += [f"![{task}: loss and accuracy per epoch](convergence-{task}.png)", ""]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"report: wrote {out}/README.md and the plots")


if __name__ == "__main__":
    main()
