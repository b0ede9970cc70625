"""ccoll's MX block quantization against torchao's MX reference, byte for byte.

    compare_torchao.py LOWP_TABLE

LOWP_TABLE is the ccoll_lowp_table program (lowp_table.cc), whose `--encode SPEC N` writes the
payload ccoll's `mx:format=F` codec makes of N float32 values. The same values go through
torchao's `to_mx` (torchao.prototype.mx_formats, OCP MX v1.0, 32-element blocks, the FLOOR
scale rule the specification gives): every block's E8M0 scale byte and every element's code
must be equal, in each of the five element formats; FP4's packed bytes too (two codes a byte,
the first in the low half). The inputs: every finite bfloat16 value in blocks of consecutive
bit patterns, and blocks of random magnitudes from 2^-140 to 2^120 (some with zeros, ties
between codes and values at the saturation limit).

One rule differs on purpose: a block whose largest magnitude is below 2^(emax - 126) gets the
scale 2^-127 (byte 0) in both, as the specification says, but torchao divides its elements by
2^-126 instead (its code clamps the divisor to the smallest normal float, a workaround for
compilers that flush subnormals), where ccoll divides by the scale it writes. Those blocks'
codes are compared with torchao's codes of the block doubled (exact at that size), which
torchao divides by 2^-126 too: x / 2^-127 either way. Exits 77 (skipped) where torch or
torchao is missing.
"""
import subprocess
import sys

try:
    import numpy as np
    import torch
    from torchao.prototype.mx_formats.mx_tensor import to_mx
except ImportError as e:  # pragma: no cover - the skip path
    print(f"compare_torchao: skipped: {e} (pip install torch torchao)")
    sys.exit(77)

BLOCK = 32
# ccoll's format name, torchao's element dtype, bits a code, emax (the largest binade)
FORMATS = [
    ("fp8e4m3", torch.float8_e4m3fn, 8, 8),
    ("fp8e5m2", torch.float8_e5m2, 8, 15),
    ("fp6e3m2", "fp6_e3m2", 6, 4),
    ("fp6e2m3", "fp6_e2m3", 6, 2),
    ("fp4e2m1", torch.float4_e2m1fn_x2, 4, 2),
]


def inputs():
    """float32 values, a multiple of BLOCK, no NaN or infinity."""
    bf16 = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    bf16 = bf16[np.isfinite(bf16)]
    bf16 = bf16[: len(bf16) // BLOCK * BLOCK]
    rng = np.random.default_rng(7)
    blocks = 4096
    mags = np.exp2(rng.uniform(-140, 120, size=(blocks, 1)))
    rand = (rng.standard_normal((blocks, BLOCK)) * mags).astype(np.float32)
    rand[::7, ::3] = 0.0  # zeros in some blocks
    rand[5::11] = 0.0  # whole blocks of zeros
    # values on the codes' rounding ties and at the saturation limit: small integers and
    # halves on a block whose largest magnitude is a power of two
    ties = np.tile(np.arange(BLOCK, dtype=np.float32) * 0.25, (64, 1))
    ties *= np.exp2(rng.integers(-20, 20, size=(64, 1))).astype(np.float32)
    return np.concatenate([bf16, rand.ravel(), ties.ravel()]).astype(np.float32)


def ccoll_payload(program, fmt, x):
    out = subprocess.run([program, "--encode", f"mx:format={fmt}", str(len(x))],
                         input=x.tobytes(), check=True, capture_output=True).stdout
    return np.frombuffer(out, dtype=np.uint8)


def unpack(packed, bits, n):
    """Codes of `bits` bits each, packed from the low bits of each byte on."""
    bitstream = np.unpackbits(packed, bitorder="little")[: n * bits]
    weights = (1 << np.arange(bits)).astype(np.uint16)
    return (bitstream.reshape(n, bits) * weights).sum(axis=1).astype(np.uint8)


def main():
    program = sys.argv[1]
    x = inputs()
    n = len(x)
    nb = n // BLOCK
    failures = 0
    for fmt, dtype, bits, emax in FORMATS:
        payload = ccoll_payload(program, fmt, x)
        scales, packed = payload[:nb], payload[nb:]
        codes = unpack(packed, bits, n)
        t_scale, t_data = to_mx(torch.from_numpy(x), dtype, BLOCK)
        t_scale = t_scale.view(torch.uint8).numpy().ravel()
        t_data = t_data.view(torch.uint8).numpy().ravel()
        t_codes = unpack(t_data, 4, n) if bits == 4 else t_data
        amax = np.abs(x.reshape(nb, BLOCK)).max(axis=1)
        # torchao divides these blocks by 2^-126, not by their scale 2^-127 (see above): their
        # codes are torchao's of the doubled block
        tiny = (amax > 0) & (amax < np.float32(2.0) ** (emax - 126))
        with np.errstate(over="ignore"):  # (the doubled large blocks are not used)
            twice = x * np.float32(2)
        _, t_twice = to_mx(torch.from_numpy(twice), dtype, BLOCK)
        t_twice = t_twice.view(torch.uint8).numpy().ravel()
        t_twice = unpack(t_twice, 4, n) if bits == 4 else t_twice
        each = np.repeat(tiny, BLOCK)
        t_codes = np.where(each, t_twice, t_codes)
        bad_scales = np.nonzero(scales != t_scale)[0]
        bad_blocks = np.nonzero((codes != t_codes).reshape(nb, BLOCK).any(axis=1))[0]
        what = f"mx:format={fmt}"
        if len(bad_scales):
            failures += 1
            b = bad_scales[0]
            print(f"FAIL {what}: {len(bad_scales)} of {nb} block scales differ (block {b}: "
                  f"ccoll {scales[b]:#x}, torchao {t_scale[b]:#x}, max |x| {amax[b]!r})")
        if len(bad_blocks):
            failures += 1
            b = bad_blocks[0]
            k = np.nonzero(codes[b * BLOCK:(b + 1) * BLOCK] != t_codes[b * BLOCK:(b + 1) * BLOCK])[0][0]
            i = b * BLOCK + k
            print(f"FAIL {what}: element codes differ in {len(bad_blocks)} of {nb} "
                  f"blocks (element {i}: {float(x[i])!r}, ccoll {codes[i]:#x}, "
                  f"torchao {t_codes[i]:#x}, scale byte {scales[b]:#x})")
        if bits == 4:  # the packed bytes of the blocks torchao divides by their scale
            usable = np.repeat(~tiny, BLOCK // 2)
            bad_bytes = np.count_nonzero((packed[: n // 2] != t_data)[usable])
            if bad_bytes:
                failures += 1
                print(f"FAIL {what}: {bad_bytes} packed bytes differ")
        if not len(bad_scales) and not len(bad_blocks):
            print(f"ok   {what}: {nb} block scales and {n} element codes equal ({tiny.sum()} "
                  f"blocks below 2^{emax - 126} against the doubled block's)")
    print(f"compare_torchao: torch {torch.__version__}; {n} values, {nb} blocks a format")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
