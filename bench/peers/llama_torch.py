# The PyTorch peer of bench_gpt2_h200 --job resources/jobs/llama-124m.yaml:
# a Llama-shaped model (RMSNorm, rotary grouped-query attention, SwiGLU MLP,
# no biases, untied LM head) trained in bf16 autocast with fused AdamW,
# eager or torch.compile'd. Timed like the GPT-2 peer: a synchronization
# around each step, the median of the steps after the first five; prints
# one JSON line with median_step_ms.
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=12)
p.add_argument("--hidden", type=int, default=768)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--kv-heads", type=int, default=4)
p.add_argument("--mlp", type=int, default=2048)
p.add_argument("--vocab", type=int, default=32000)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--steps", type=int, default=30)
p.add_argument("--compile", type=int, default=0)
a = p.parse_args()
dev = "cuda"
head = a.hidden // a.heads


def rotary_tables(seq, width, base=10000.0):
    # cos and sin of position t's angle for frequency i < width/2, for the
    # "rotate half" pairing (i, i + width/2), as tandem's kernels pair them.
    inv = base ** (-torch.arange(0, width // 2, dtype=torch.float64) * 2 / width)
    angle = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    return angle.cos().float().to(dev), angle.sin().float().to(dev)


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.RMSNorm(a.hidden, eps=1e-5)
        self.qkv = nn.Linear(a.hidden, (a.heads + 2 * a.kv_heads) * head, bias=False)
        self.proj = nn.Linear(a.hidden, a.hidden, bias=False)
        self.norm2 = nn.RMSNorm(a.hidden, eps=1e-5)
        self.gate_up = nn.Linear(a.hidden, 2 * a.mlp, bias=False)
        self.down = nn.Linear(a.mlp, a.hidden, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([a.heads * head, a.kv_heads * head, a.kv_heads * head], dim=2)
        q = rotate(q.view(B, T, a.heads, head).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, T, a.kv_heads, head).transpose(1, 2), cos, sin)
        v = v.view(B, T, a.kv_heads, head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=a.kv_heads != a.heads)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.hidden)
        self.blocks = nn.ModuleList([Block() for _ in range(a.layers)])
        self.norm = nn.RMSNorm(a.hidden, eps=1e-5)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)
        cos, sin = rotary_tables(a.seq, head)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx, tgt):
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))


torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
m = Llama().to(dev)
params = sum(t.numel() for t in m.parameters())
if a.compile:
    m = torch.compile(m)
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
tgt = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
times = []
for _ in range(a.steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(idx, tgt)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
steady = sorted(times[5:])
med = steady[len(steady) // 2]
tokens_per_s = a.batch * a.seq / med
flops_per_token = 6 * params + 12 * a.layers * a.hidden * a.seq  # PaLM's, attention included
print(json.dumps(dict(model="llama", world=1, params=params, compile=a.compile, batch=a.batch, seq=a.seq,
                      median_step_ms=round(med * 1e3, 2), min_step_ms=round(steady[0] * 1e3, 2),
                      tokens_per_s=round(tokens_per_s), mfu_vs_989T=round(tokens_per_s * flops_per_token / 989e12, 3),
                      loss=float(loss), peak_mem_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2))),
      flush=True)
