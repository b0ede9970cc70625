"""The convergence harness's text task: a small causal transformer (byte embeddings, learned
positions, pre-LayerNorm self-attention blocks) learns to predict the next byte of English text,
trained with AdamW through PyTorch DDP and ccoll's communication hook; one codec per launch,
written as one JSON line in the format of ccoll_train (bench/convergence/report.py reads both).

usage: mpiexec -n P python3 bench/convergence/text_transformer.py --codec SPEC --label LABEL
           --out FILE.jsonl [--data DIR] [--seed S] [--steps N] [--evals E] [--lr LR]
           [--batch B] [--seq T] [--width D] [--layers L]
       mpiexec -n P python3 bench/convergence/text_transformer.py --check

--data DIR: the text, every regular file of DIR without a dot in its name, in name order, split
into entries at lines holding only "%" (default: Debian's fortunes package,
/usr/share/games/fortunes, or $CCOLL_TEXT_DIR); every tenth entry is held out for the test, the
rest trains. Each step, each rank draws B windows of T+1 bytes from the training text (from
its own generator: seed, rank, step), and the model, identical on every rank, is scored every
N/E steps on 256 fixed test windows: mean cross-entropy per byte (nats) and next-byte accuracy.
--codec: a ccoll codec spec for the hook ("none": every gradient through ccoll uncompressed);
parameters below the hook's min_numel and 1-D ones (biases, LayerNorm) are averaged exactly, as
the hook does by default. The learning rate warms up over the first 5% of the steps, then decays
as a cosine to a tenth. "relative_error" is ||hook's average - exact average|| / ||exact
average|| over all buckets and steps (exact: a separate gloo all-reduce of each bucket, not
counted in the bytes); "grad_bits_per_element" is 8 x the bytes the hook sent on all ranks /
(2 (P-1) x parameters x steps), as ccoll_train counts them.
--check: 30 steps through maxnorm:bits=4,ef=1, nothing written; exit 1 unless the test loss
ends below 4 nats per byte (a model that predicts nothing scores ln 256 = 5.5; the bytes'
frequencies alone about 3.3). Every run exits 1 when the ranks' parameters differ.
Exit 77 when torch, mpi4py or the text is missing.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

SKIP = 77
CHECK_LOSS = 4.0  # nats per byte, --check's limit
DEFAULT_DATA = os.environ.get("CCOLL_TEXT_DIR", "/usr/share/games/fortunes")


def load_text(directory):
    """(train bytes, test bytes) from the entries of the files in `directory`."""
    names = sorted(n for n in os.listdir(directory)
                   if "." not in n and os.path.isfile(os.path.join(directory, n))
                   and not os.path.islink(os.path.join(directory, n)))
    entries = []
    for n in names:
        with open(os.path.join(directory, n), "rb") as f:
            entries += [e.strip(b"\n") + b"\n" for e in f.read().split(b"\n%\n") if e.strip()]
    train = b"".join(e for i, e in enumerate(entries) if i % 10)
    test = b"".join(e for i, e in enumerate(entries) if i % 10 == 0)
    return train, test


def make_model(torch, seq, width, layers):
    nn = torch.nn

    class ByteTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(256, width)
            self.pos = nn.Embedding(seq, width)
            block = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width,
                                               dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, 256)
            self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

        def forward(self, x):
            t = x.shape[1]
            h = self.embed(x) + self.pos(torch.arange(t))
            return self.head(self.norm(self.blocks(h, mask=self.mask[:t, :t])))

    return ByteTransformer()


def windows(torch, text, count, seq, gen):
    """`count` windows of seq+1 bytes at random offsets: (inputs, targets)."""
    starts = torch.randint(0, text.numel() - seq - 1, (count,), generator=gen)
    w = torch.stack([text[s:s + seq + 1] for s in starts.tolist()]).long()
    return w[:, :-1], w[:, 1:]


def measuring_hook(dist, ccoll_hook, totals):
    """ccoll's hook, plus the exact average of each bucket to measure its error against."""
    def hook(state, bucket):
        exact = bucket.buffer().clone()
        dist.all_reduce(exact)
        exact /= dist.get_world_size()

        def done(fut):
            out = fut.value()
            out = out[0] if isinstance(out, list) else out
            totals[0] += float(((out - exact) ** 2).sum())
            totals[1] += float((exact ** 2).sum())
            return out

        return ccoll_hook(state, bucket).then(done)

    return hook


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--codec")
    ap.add_argument("--label")
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--evals", type=int, default=10)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    if args.check:
        args.codec, args.steps, args.evals = "maxnorm:bits=4,ef=1", 30, 2
    elif not (args.codec and args.label and args.out):
        ap.error("--codec, --label and --out are required (or --check)")
    for name in ("steps", "evals", "batch", "seq", "width", "layers"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: {getattr(args, name)} (valid: a positive integer)")
    if args.width % 4:
        ap.error(f"--width: {args.width} (valid: a multiple of 4, the attention heads)")
    try:
        import torch
        import torch.distributed as dist
        from mpi4py import MPI
    except ImportError as e:
        print(f"text_transformer: skipped: {e}", file=sys.stderr)
        return SKIP
    if not os.path.isdir(args.data):
        print(f"text_transformer: skipped: no text in {args.data} (install Debian's fortunes "
              "or set --data)", file=sys.stderr)
        return SKIP
    import ccoll.torch as ct
    from torch.nn.parallel import DistributedDataParallel as DDP

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    ct.init_process_group()
    torch.set_num_threads(1)
    train, test = (torch.frombuffer(bytearray(t), dtype=torch.uint8) for t in load_text(args.data))
    if min(train.numel(), test.numel()) <= args.seq + 1:
        ap.error(f"--data: {args.data} holds too little text for --seq {args.seq}")
    tx, ty = windows(torch, test, 256, args.seq, torch.Generator().manual_seed(12345))
    torch.manual_seed(args.seed)
    net = make_model(torch, args.seq, args.width, args.layers)
    params = sum(p.numel() for p in net.parameters())
    model = DDP(net)
    state = ct.CcollHookState(codec=args.codec, seed=args.seed,
                              names={p: n for n, p in net.named_parameters()})
    totals = [0.0, 0.0]
    model.register_comm_hook(state, measuring_hook(dist, ct.ccoll_hook, totals))
    decay = [p for n, p in net.named_parameters() if p.dim() > 1 and "embed" not in n
             and "pos" not in n]
    rest = [p for p in net.parameters() if all(p is not q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=args.lr,
                            betas=(0.9, 0.98))
    warm = max(1, args.steps // 20)

    def lr_at(step):
        if step < warm:
            return args.lr * (step + 1) / warm
        frac = (step - warm) / max(1, args.steps - warm)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    losses, accuracies, test_losses = [], [], []
    every = max(1, args.steps // args.evals)
    run_loss, run_n, t0 = 0.0, 0, time.perf_counter()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 101 + rank)
        x, y = windows(torch, train, args.batch, args.seq, gen)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        loss.backward()
        opt.step()
        run_loss += float(loss)
        run_n += 1
        if (step + 1) % every == 0 or step + 1 == args.steps:
            with torch.no_grad():  # each rank scores its share of the test windows
                logits = net(tx[rank::size])
                mine = ty[rank::size]
                nll = float(torch.nn.functional.cross_entropy(
                    logits.reshape(-1, 256), mine.reshape(-1), reduction="sum"))
                hits = float((logits.argmax(-1) == mine).sum())
            nll, hits = comm.allreduce(nll), comm.allreduce(hits)
            test_losses.append(nll / ty.numel())
            accuracies.append(hits / ty.numel() * 100)
            losses.append(float(comm.allreduce(run_loss / run_n)) / size)
            run_loss, run_n = 0.0, 0
            if rank == 0:
                print(f"step {step + 1:5d}  train loss {losses[-1]:.4f}  test loss "
                      f"{test_losses[-1]:.4f}  test accuracy {accuracies[-1]:.2f}%", flush=True)
    seconds = time.perf_counter() - t0
    h = hashlib.sha256()
    for p in net.parameters():
        h.update(p.detach().numpy().tobytes())
    digest = comm.allgather(h.hexdigest())
    if len(set(digest)) != 1:
        print("text_transformer: the ranks' parameters differ", file=sys.stderr)
        return 1
    sent = comm.allreduce(state.wire_bytes_sent)
    err = comm.allreduce(totals[0]) / size
    ref = comm.allreduce(totals[1]) / size
    state.shutdown()
    moved = 2 * (size - 1) * params * args.steps
    bits = 8 * sent / moved if size > 1 else 0.0
    rel = math.sqrt(err / ref) if ref > 0 else 0.0
    if args.check:
        ok = test_losses[-1] < CHECK_LOSS
        if rank == 0:
            print(f"text_transformer --check: test loss {test_losses[-1]:.4f} after {args.steps} "
                  f"steps (limit {CHECK_LOSS}), ranks bit-identical: "
                  f"{'passed' if ok else 'FAILED'}", flush=True)
        return 0 if ok else 1
    if rank == 0:
        print(f"final: test loss {test_losses[-1]:.4f} ({test_losses[-1] / math.log(2):.3f} "
              f"bits/byte), next-byte accuracy {accuracies[-1]:.2f}%, {bits:.2f} bits/element on "
              f"the wire, relative error of the average {rel:.3g}, {seconds:.1f} s", flush=True)
        row = {"label": args.label, "codec": args.codec, "weight_codec": "none",
               "optimizer": "adamw", "comm": "grad", "model": "transformer", "ranks": size,
               "data": "text", "seed": args.seed, "steps": args.steps, "params": params,
               "final_accuracy": round(accuracies[-1], 4), "final_loss": round(losses[-1], 6),
               "final_test_loss": round(test_losses[-1], 6),
               "grad_bits_per_element": round(bits, 4), "weight_bits_per_element": 0.0,
               "wire_bytes": sent, "relative_error": float(f"{rel:.6g}"),
               "loss": [round(v, 6) for v in losses],
               "accuracy": [round(v, 4) for v in accuracies],
               "test_loss": [round(v, 6) for v in test_losses]}
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
