#!/usr/bin/env python3
"""Grades a GPU run (bench/gpu/run_gpu.sh): reads its tables and prints each target with its
measured value and PASS, FAIL or MISSING; exits 1 when any target fails or is missing, 0 when
every one passes, 2 on bad arguments.

    bench/gpu/grade.py OUT_DIR [--markdown FILE]

The targets (each row names its table, its row and its bound):
  kernels.md, 64 MiB, "vs D2D traffic" (bytes read and written per second over the copy's):
    maxnorm bits=8/4/2 scan + encode >= 0.7, decode-accumulate >= 0.7,
    ef=1 scan + encode (fused) >= 0.5
  allreduce.md, 2 ranks, 64 MiB, over a network link (network namespaces):
    maxnorm:bits=8 (the faster of its plain and stream-ordered fp32 rows) >= 2.7x
    ncclAllReduce fp32; maxnorm:bits=8 (bf16 in, stream-ordered), which must have run
    stream-ordered, >= 1.35x ncclAllReduce bf16; each with an error below 0.05 of the sum's
    largest magnitude
  ddp_step.md: the fastest ccoll hook mode whose loss is within 1% (+0.001) of torch's
    bf16_compress_hook has a shorter step than that hook
  interposer.md: DDP and FSDP2 under libccoll_nccl without a codec end with parameters bit for
    bit those of plain NCCL

Where the all-reduce ran over loopback sockets (no network namespaces on the machine) its
speed-ups are a functional check, not a network: those targets are MISSING, and the grade
derives instead, from the wire bytes each row sent (ccoll's Stats) and the kernels' measured
cost, the link rate below which maxnorm:bits=8 beats ncclAllReduce fp32, next to the slope of
time against size from 64 to 256 MiB (see docs/device.md, "Reading the link").
"""
import argparse
import os
import re
import sys

KERNEL_SIZE = "64 MiB"
KERNEL_MIN = 0.7
EF_MIN = 0.5
FP32_MIN = 2.7
BF16_MIN = 1.35
ERROR_MAX = 0.05
LOSS_REL = 0.01
LOSS_ABS = 0.001


def cells(line):
    """The cells of a Markdown table row, or None for a line that is not one."""
    line = line.strip()
    if not line.startswith("|") or not line.endswith("|") or set(line) <= set("|-: "):
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def tables(text):
    """Every Markdown table of `text`: (context, header, rows), rows as dicts by header. A
    header is a row followed by the separator row; the rows that follow with as many cells are
    its rows, lines between them that are not table rows (a library's or torch's messages on
    the same output) notwithstanding, until the next header or heading. The context is the last
    line starting with '#' before the table (e.g. '# 2 ranks, ...')."""
    out = []
    context = ""
    header = None
    rows = []
    lines = text.splitlines()

    def separator(line):
        return bool(line.strip()) and set(line.strip()) <= set("|-: ")

    for i, line in enumerate(lines):
        if separator(line):
            continue
        c = cells(line)
        starts = c is not None and i + 1 < len(lines) and separator(lines[i + 1])
        if starts or line.startswith("#") or line.startswith("== "):
            if header is not None:
                out.append((context, header, rows))
                header, rows = None, []
            if starts:
                header = c
            else:
                context = line if line.startswith("#") else context
            continue
        if header is not None and c is not None and len(c) == len(header):
            rows.append(dict(zip(header, c)))
    if header is not None:
        out.append((context, header, rows))
    return out


def number(text):
    m = re.match(r"\s*([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)", text or "")
    return float(m.group(1)) if m else None


def read(out, name):
    path = os.path.join(out, name)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def link_of(text):
    """The 'Link: ...' line run_gpu.sh writes at the head of a table file."""
    for line in (text or "").splitlines():
        if line.startswith("Link: "):
            return line[len("Link: "):]
    return None


class Grade:
    def __init__(self):
        self.lines = []
        self.bad = 0

    def target(self, name, value, bound, verdict, note=""):
        """verdict: True (PASS), False (FAIL), None (MISSING)."""
        word = {True: "PASS", False: "FAIL", None: "MISSING"}[verdict]
        if verdict is not True:
            self.bad += 1
        self.lines.append((word, name, value, bound, note))

    def render(self):
        out = ["| result | target | measured | bound | note |", "|---|---|---|---|---|"]
        for word, name, value, bound, note in self.lines:
            out.append(f"| {word} | {name} | {value} | {bound} | {note} |")
        return "\n".join(out)


def grade_kernels(g, text):
    rows = {}
    for _, header, body in tables(text or ""):
        if "vs D2D traffic" not in header:
            continue
        for r in body:
            if r.get("size") == KERNEL_SIZE:
                rows[r["kernel"]] = number(r["vs D2D traffic"])
    for bits in (8, 4, 2):
        for kind, bound in (("scan + encode", KERNEL_MIN), ("decode-accumulate", KERNEL_MIN),
                            ("ef=1 scan + encode (fused)", EF_MIN)):
            name = (f"maxnorm:bits={bits},{kind}" if kind.startswith("ef=1")
                    else f"maxnorm:bits={bits} {kind}")
            v = rows.get(name)
            what = f"kernel {name}, {KERNEL_SIZE}, traffic over the copy's"
            if v is None:
                g.target(what, "-", f">= {bound}", None,
                         "no such row in kernels.md" if text else "kernels.md missing")
            else:
                g.target(what, f"{v:.2f}", f">= {bound}", v >= bound)


def allreduce_rows(text):
    """{(ranks, size, method): row} from allreduce.md's tables."""
    out = {}
    for context, header, body in tables(text or ""):
        if "method" not in header or "ms" not in header:
            continue
        m = re.match(r"#+\s*(\d+) ranks", context)
        ranks = int(m.group(1)) if m else 0
        for r in body:
            out[(ranks, r["size"], r["method"])] = r
    return out


def grade_allreduce(g, text):
    link = link_of(text)
    rows = allreduce_rows(text)
    network = link is not None and "loopback" not in link

    def get(method, size="64 MiB"):
        return rows.get((2, size, method))

    for what, bound, nccl, candidates, must_so in (
            ("maxnorm:bits=8 over ncclAllReduce fp32, 2 ranks, 64 MiB", FP32_MIN,
             "ncclAllReduce fp32", ["maxnorm:bits=8", "maxnorm:bits=8 (stream-ordered)"], False),
            ("maxnorm:bits=8 bf16 in, stream-ordered, over ncclAllReduce bf16, 2 ranks, 64 MiB",
             BF16_MIN, "ncclAllReduce bf16", ["maxnorm:bits=8 (bf16 in, stream-ordered)"], True)):
        base = get(nccl)
        found = [(c, get(c)) for c in candidates if get(c) is not None]
        if text is None or base is None or not found:
            g.target(what, "-", f">= {bound}x", None,
                     "allreduce.md missing" if text is None else "rows missing in allreduce.md")
            continue
        best, row = min(found, key=lambda cr: number(cr[1]["ms"]) or float("inf"))
        t, tn = number(row["ms"]), number(base["ms"])
        speed = tn / t if t else 0.0
        err = number(row["error"])
        note = f"{best}: {t:.2f} ms against {tn:.2f} ms; error {row['error']}"
        if must_so and "not stream-ordered" in row["transport"]:
            g.target(what, f"{speed:.2f}x", f">= {bound}x", False,
                     note + "; the call did not run stream-ordered")
        elif not network:
            g.target(what, f"{speed:.2f}x", f">= {bound}x", None,
                     note + " (a functional check, not a network; see the derived link rate)")
        else:
            ok = speed >= bound and err is not None and err <= ERROR_MAX
            g.target(what, f"{speed:.2f}x", f">= {bound}x", ok,
                     note + ("" if err is not None and err <= ERROR_MAX else
                             f"; error above {ERROR_MAX}"))
    return rows, link


def kernel_seconds_per_byte(text, bits=8):
    """Seconds per fp32 input byte of one scan + encode and one decode-accumulate pass (64 MiB),
    from kernels.md's GB/s column (fp32 bytes per second), or None."""
    enc = dec = None
    for _, header, body in tables(text or ""):
        if "vs D2D traffic" not in header:
            continue
        for r in body:
            if r.get("size") != KERNEL_SIZE:
                continue
            if r["kernel"] == f"maxnorm:bits={bits} scan + encode":
                enc = number(r["GB/s"])
            elif r["kernel"] == f"maxnorm:bits={bits} decode-accumulate":
                dec = number(r["GB/s"])
    if not enc or not dec:
        return None
    return 1.0 / (enc * 1e9) + 1.0 / (dec * 1e9)


def derive_link(rows, kernels_text):
    """The link rate below which maxnorm:bits=8 beats ncclAllReduce fp32 (2 ranks): Markdown
    lines, from the wire bytes and the kernels' cost and from the slopes of 64 -> 256 MiB."""
    lines = []
    mib = 1 << 20

    def row(method, size):
        return rows.get((2, f"{size} MiB", method))

    nccl64, nccl256 = row("ncclAllReduce fp32", 64), row("ncclAllReduce fp32", 256)
    cc64 = row("maxnorm:bits=8", 64) or row("maxnorm:bits=8 (stream-ordered)", 64)
    if nccl64 is None or cc64 is None or number(cc64.get("wire MB/rank")) is None:
        return ["The derived link rate needs allreduce.md's 2-rank rows at 64 MiB with their "
                "wire bytes (ncclAllReduce fp32, maxnorm:bits=8): missing."]
    size = 64 * mib
    # bytes sent per input byte: NCCL's ring 2(P-1)/P = 1 at 2 ranks; ccoll's from Stats
    k = number(nccl64["wire MB/rank"]) * 1e6 / size
    w = number(cc64["wire MB/rank"]) * 1e6 / size
    lines.append(f"- Bytes sent per input byte at 64 MiB, 2 ranks: ncclAllReduce fp32 {k:.3f}, "
                 f"maxnorm:bits=8 {w:.3f} (Stats::wire_bytes_sent).")
    c = kernel_seconds_per_byte(kernels_text)
    if c is not None and k > w:
        rate = (k - w) / c
        lines.append(f"- Kernels alone (one scan + encode and one decode-accumulate pass, "
                     f"kernels.md at 64 MiB): {c * 1e12:.2f} ps per input byte, so ccoll wins "
                     f"on any link slower than (k - w) / c = {rate / 1e9:.0f} GB/s "
                     f"({rate * 8 / 1e9:.0f} Gbit/s): an upper bound, host costs left out.")
    if nccl256 is not None:
        cc256 = row(cc64["method"], 256)
        t_n = (number(nccl256["ms"]) - number(nccl64["ms"])) * 1e-3 / (192 * mib)
        line = (f"- Slope of time against size, 64 -> 256 MiB: ncclAllReduce fp32 "
                f"{t_n * 1e12:.1f} ps per input byte")
        if t_n > 0:
            line += f" (the link as NCCL saw it: {k / t_n / 1e9:.2f} GB/s)"
        if cc256 is not None:
            t_c = (number(cc256["ms"]) - number(cc64["ms"])) * 1e-3 / (192 * mib)
            line += f"; {cc64['method']} {t_c * 1e12:.1f} ps per input byte"
            if t_n > 0:
                # ccoll's per-byte cost beyond its wire bytes at NCCL's observed link rate
                extra = t_c - w * t_n / k
                line += f", of which {extra * 1e12:.1f} ps is not its wire bytes"
                if extra > 0 and k > w:
                    rate = (k - w) / extra
                    line += (f": ccoll wins on links slower than {rate / 1e9:.1f} GB/s "
                             f"({rate * 8 / 1e9:.0f} Gbit/s) by this measure")
        lines.append(line + ".")
    else:
        lines.append("- No 256 MiB rows: the slope of time against size is missing.")
    return lines


def grade_ddp(g, text):
    what = "DDP step: ccoll's hook faster than torch's bf16_compress_hook at equal loss"
    rows = {}
    for _, header, body in tables(text or ""):
        if "mode" in header and "step s" in header:
            rows.update({r["mode"]: r for r in body})
    torch_row = rows.get("torch:bf16_compress_hook")
    if torch_row is None:
        g.target(what, "-", "faster", None,
                 "ddp_step.md missing" if text is None else "no torch:bf16_compress_hook row")
        return
    t_bf, l_bf = number(torch_row["step s"]), number(torch_row["loss"])
    ccoll_rows = [r for m, r in rows.items() if m != "plain" and not m.startswith("torch:")]
    equal = [r for r in ccoll_rows
             if number(r["loss"]) is not None and
             abs(number(r["loss"]) - l_bf) <= LOSS_REL * abs(l_bf) + LOSS_ABS]
    if not equal:
        g.target(what, "-", "faster", False if ccoll_rows else None,
                 f"no ccoll mode within 1% of bf16_compress_hook's loss {l_bf}" if ccoll_rows
                 else "no ccoll rows")
        return
    best = min(equal, key=lambda r: number(r["step s"]))
    t = number(best["step s"])
    g.target(what, f"{t:.3f} s ({best['mode']})", f"< {t_bf:.3f} s", t < t_bf,
             f"loss {best['loss']} against {l_bf}")


def grade_interposer(g, text):
    rows = {}
    for _, header, body in tables(text or ""):
        if "run" in header and "params = plain" in header:
            rows.update({r["run"]: r for r in body})
    for mode in ("ddp", "fsdp"):
        what = f"interposer, {mode} without a codec: parameters bit-identical to plain NCCL"
        r = rows.get(f"{mode} nocodec")
        if r is None:
            g.target(what, "-", "True", None,
                     "interposer.md missing" if text is None else "row missing")
        else:
            g.target(what, r["params = plain"], "True", r["params = plain"] == "True")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the run's output folder (bench/gpu/run_gpu.sh OUT_DIR)")
    ap.add_argument("--markdown", help="also write the grade to this file")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.out):
        ap.error(f"{args.out}: no such folder")
    g = Grade()
    kernels = read(args.out, "kernels.md")
    grade_kernels(g, kernels)
    allreduce = read(args.out, "allreduce.md")
    rows, link = grade_allreduce(g, allreduce)
    grade_ddp(g, read(args.out, "ddp_step.md"))
    grade_interposer(g, read(args.out, "interposer.md"))
    passed = sum(1 for line in g.lines if line[0] == "PASS")
    text = ["# Grade", "", f"Folder: `{args.out}`. Link: {link or 'unknown (allreduce.md missing)'}.",
            "", g.render(), "",
            f"{passed} of {len(g.lines)} targets passed; "
            + ("every target PASSED." if g.bad == 0 else f"{g.bad} FAILED or MISSING."),
            "", "## The link rate below which ccoll wins (maxnorm:bits=8 against ncclAllReduce "
            "fp32, 2 ranks)", ""]
    text += derive_link(rows, kernels) if allreduce else ["allreduce.md missing."]
    report = "\n".join(text) + "\n"
    sys.stdout.write(report)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(report)
    return 1 if g.bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
