#!/usr/bin/env python3
"""Times attention as frameworks ran it before fused (flash) kernels: the
scores materialized in HBM, one kernel per step, as Megatron-LM's 2021-2022
GPT did it (the published Megatron rows, resources/published/a*.yaml, c*.yaml).

Per shape (micro-batch b, heads on this GPU h, sequence t, head width d) it
times each kernel alone, back to back on one stream with CUDA events, at
16-bit precision:
  forward:  S = Q K^T (scaled, batched GEMM), P = softmax(S) (one pass),
            P' = dropout(P), O = P' V
  backward: dP' = dO V^T, dV = P'^T dO, dP = dropout backward,
            dS = softmax backward, dQ = dS K, dK = dS^T Q
and prints one JSON line per shape with each kernel's median time (ms).
bench_materialized_attention reads these lines and sets the cost model's
time beside each.

  python3 materialized_attention_torch.py [--dtype bf16|fp16] [--reps N] > OUT.jsonl
"""
import argparse
import json
import sys

import torch

# (b, heads on one GPU, sequence, head width): the published Megatron rows'
# per-GPU attention (tensor parallel 8 splits the heads) and a few more
# head widths and sequences.
SHAPES = [
    (16, 24, 2048, 96),   # GPT 1.7B, tensor parallel 1 (row A1)
    (8, 6, 2048, 128),    # 18.4B at tensor parallel 8 (A4)
    (4, 8, 2048, 128),    # 39.1B (A5), 22B (C1)
    (2, 10, 2048, 128),   # 76.1B (A6)
    (1, 20, 2048, 160),   # 1T (A10, C4)
    (8, 16, 2048, 64),
    (16, 16, 1024, 64),
    (4, 16, 1024, 128),
    (1, 16, 4096, 128),
]


def timed(fn, reps):
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(3):
        fn()
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--dropout", type=float, default=0.1)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("materialized_attention_torch: no CUDA device", file=sys.stderr)
        return 77
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(0)
    for b, h, t, d in SHAPES:
        g = b * h
        q = torch.randn(g, t, d, device=dev, dtype=dtype)
        k = torch.randn(g, t, d, device=dev, dtype=dtype)
        v = torch.randn(g, t, d, device=dev, dtype=dtype)
        do = torch.randn(g, t, d, device=dev, dtype=dtype)
        scale = d ** -0.5
        empty = torch.empty(g, t, t, device=dev, dtype=dtype)
        s = torch.baddbmm(empty, q, k.transpose(1, 2), beta=0.0, alpha=scale)
        p = torch.softmax(s, dim=-1)
        pd, mask = torch.ops.aten.native_dropout(p, args.dropout, True)
        keep = 1.0 / (1.0 - args.dropout)
        times = {
            "qk": timed(lambda: torch.baddbmm(empty, q, k.transpose(1, 2), beta=0.0, alpha=scale), args.reps),
            "softmax": timed(lambda: torch.softmax(s, dim=-1), args.reps),
            "dropout": timed(lambda: torch.ops.aten.native_dropout(p, args.dropout, True), args.reps),
            "pv": timed(lambda: torch.bmm(pd, v), args.reps),
            "dp": timed(lambda: torch.bmm(do, v.transpose(1, 2)), args.reps),
            "dv": timed(lambda: torch.bmm(pd.transpose(1, 2), do), args.reps),
            "dropout_bwd": timed(lambda: torch.ops.aten.native_dropout_backward(s, mask, keep), args.reps),
            "softmax_bwd": timed(lambda: torch.ops.aten._softmax_backward_data(s, p, -1, dtype), args.reps),
            "dq": timed(lambda: torch.bmm(s, k), args.reps),
            "dk": timed(lambda: torch.bmm(s.transpose(1, 2), q), args.reps),
        }
        fwd = times["qk"] + times["softmax"] + times["dropout"] + times["pv"]
        bwd = sum(times[n] for n in ("dp", "dv", "dropout_bwd", "softmax_bwd", "dq", "dk"))
        print(json.dumps({"bench": "materialized_attention_torch", "gpu": gpu, "dtype": args.dtype,
                          "b": b, "h": h, "t": t, "d": d, "dropout": args.dropout,
                          "forward_ms": round(fwd, 4), "backward_ms": round(bwd, 4),
                          "kernels_ms": {n: round(x, 4) for n, x in times.items()}}), flush=True)
        del q, k, v, do, empty, s, p, pd, mask
        torch.cuda.empty_cache()
    # Plain GEMMs over their depth at two output sizes: how far from its
    # best a shallow GEMM runs (the cost model's depth factor).
    for rows, cols in ((8192, 8192), (2048, 2048)):
        for depth in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
            a = torch.randn(rows, depth, device=dev, dtype=dtype)
            w = torch.randn(depth, cols, device=dev, dtype=dtype)
            ms = timed(lambda: torch.matmul(a, w), args.reps)
            print(json.dumps({"bench": "gemm_depth_torch", "gpu": gpu, "dtype": args.dtype, "rows": rows,
                              "cols": cols, "depth": depth, "ms": round(ms, 5),
                              "tflops": round(2.0 * rows * cols * depth / (ms * 1e-3) / 1e12, 1)}), flush=True)
            del a, w
    return 0


if __name__ == "__main__":
    sys.exit(main())
