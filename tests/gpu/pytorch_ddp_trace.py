#!/usr/bin/env python3
"""Writes a real PyTorch profiler (Kineto) trace of 2-process DDP training of
a GPT-2-shaped model, one file per rank, for issue 52's acceptance check of
`tandem import` (tests/scripts/check_kineto_import.py).

    python3 tests/gpu/pytorch_ddp_trace.py --out DIR [--backend auto|nccl|gloo]
        [--layers 12 --hidden 768 --heads 12 --seq 1024 --batch 8]

It spawns its own processes (torch.multiprocessing; no torchrun), trains
GPT-2 124M's shape (or smaller, with the options) under DDP for 7 steps in
bf16 autocast with fused AdamW and gradient clipping, on random tokens, and
profiles steps 4-6 with torch.profiler (schedule wait=1, warmup=3, active=3:
the steps are named ProfilerStep#4, #5 and #6). Each rank writes
DIR/rank<R>.pt.trace.json.gz (export_chrome_trace gzips a name ending in
.gz), whose distributedInfo names its rank. Then:

    tandem import DIR --out ddp.sqlite && tandem report ddp.sqlite
    python3 tests/scripts/check_kineto_import.py --tandem build/cli/tandem DIR \
        --expect-ranks 0,1 --expect-steps 4,5,6

Backend: NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so
--backend auto (the default) takes nccl, rank R on cuda:R, when there are at
least as many GPUs as ranks, and otherwise gloo with every rank on cuda:0.
With gloo, DDP's allreduces are gloo's host-side work: the trace has no NCCL
kernels, so communication, overlap and exposed communication are 0 on both
sides of the check (which then checks the import, ranks, steps and
compute). The NCCL figures of the acceptance point need two GPUs.

Needs PyTorch 2.x with CUDA (written for 2.11) and one or more GPUs; the
default shape takes about 10 GiB of GPU memory per rank.
"""
import argparse
import math
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 7  # steps 0-6: 0 waits, 1-3 warm up, 4-6 are recorded


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads = a.heads
        self.ln_1 = nn.LayerNorm(a.hidden)
        self.c_attn = nn.Linear(a.hidden, 3 * a.hidden)
        self.attn_proj = nn.Linear(a.hidden, a.hidden)
        self.ln_2 = nn.LayerNorm(a.hidden)
        self.c_fc = nn.Linear(a.hidden, 4 * a.hidden)
        self.mlp_proj = nn.Linear(4 * a.hidden, a.hidden)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.hidden)
        self.wpe = nn.Embedding(a.seq, a.hidden)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.hidden)
        self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * a.layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def worker(rank, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = torch.device("cuda", rank if a.backend == "nccl" else 0)
    torch.cuda.set_device(device)
    dist.init_process_group(a.backend, rank=rank, world_size=a.world_size)
    torch.manual_seed(1234)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = GPT(a).to(device)
    ddp = DDP(model, device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    tokens = torch.Generator().manual_seed(100 + rank)  # each rank its own data

    def batch():
        x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=tokens).pin_memory()
        y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=tokens).pin_memory()
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    path = os.path.join(a.out, "rank%d.pt.trace.json%s" % (rank, "" if a.plain_json else ".gz"))

    def save(prof):
        prof.export_chrome_trace(path)

    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    schedule = torch.profiler.schedule(wait=1, warmup=3, active=3, repeat=1)
    losses = []
    with torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=save) as prof:
        for _ in range(STEPS):
            x, y = batch()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = ddp(x)
            loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())  # synchronizes the host once per step
            prof.step()
    dist.barrier()
    print("rank %d (%s, %s): losses %s -> %s" % (rank, a.backend, device, " ".join("%.3f" % v for v in losses), path),
          flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the per-rank traces (created)")
    ap.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                    help="auto: nccl with a GPU per rank, else gloo with every rank on cuda:0")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--plain-json", action="store_true", help="write .json instead of .json.gz")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this script profiles GPU training")
    gpus = torch.cuda.device_count()
    if a.backend == "auto":
        a.backend = "nccl" if gpus >= a.world_size else "gloo"
    if a.backend == "nccl" and gpus < a.world_size:
        raise SystemExit("nccl needs a GPU per rank (%d ranks, %d GPUs): NCCL refuses two ranks on one GPU; "
                         "use --backend gloo" % (a.world_size, gpus))
    os.makedirs(a.out, exist_ok=True)
    print("DDP over %d processes, backend %s, %d GPU(s); traces of ProfilerStep#4-#6 into %s"
          % (a.world_size, a.backend, gpus, a.out), flush=True)
    mp.spawn(worker, args=(a, free_port()), nprocs=a.world_size, join=True)
    print("wrote " + ", ".join(sorted(os.listdir(a.out))))


if __name__ == "__main__":
    main()
