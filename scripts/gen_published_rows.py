#!/usr/bin/env python3
# Writes resources/published/*.yaml, one file per row of the published
# reference (docs/accuracy.md): the source, the published step time and how
# it was obtained, the job and topology in tandem's terms, and what tandem
# models differently. Run it after changing a row's setup here; the files it
# writes are what bench_published and the tests read.
import os
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'resources', 'published')
MEG_SRC = ("Narayanan et al. SC21, Table 1: Megatron-LM README image images/cases_april2021.png @50a4b5fa02; "
           "settings from examples/academic_paper_scripts/sc21/run_table_1.sh @d98e8a64dd")
MEG_NOTE = ("achieved {tf} TFLOP/s per GPU printed; step = F / (TFLOP/s x N) with the paper's "
            "F = 96 B s l h^2 (1 + s/6h + V/16lh) (recompute counted)")
KOR_SRC = ("Korthikanti et al. 2022, Table 5 (arXiv 2205.05198), as transcribed in calculon-ai/calculon "
           "calculon/llm/validation.py @caa4b11f (seqsel_tab5); configs validation/seqsel/tab5/*.json")
DGXC_SRC = "NVIDIA/dgxc-benchmarking v25.04 llama3.1/README.md (NeMo 25.02.01), EOS DGX H100"
NEMO_SRC = "NVIDIA/dgxc-benchmarking v25.05.04 nemotron/README.md, EOS DGX H100"
TT_SRC = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md @b5bcd76c (torch 2024-12-23, torchtitan 9dec370)"

def q(s): return '"' + s.replace('"', '\\"') + '"'

def write(rid, title, source, hw, topology, step, prov, note, series, gpus, approx, notmod, job, comment,
          in_reference=True):
    lines = ['# ' + l for l in comment] + [
        f'id: {rid}', f'title: {q(title)}', f'source: {q(source)}', f'hardware: {hw}', f'topology: {topology}',
        'published:', f'  step_s: {step}', f'  provenance: {prov}', f'  note: {q(note)}']
    if not in_reference: lines.append('in_reference: false')
    if series: lines.append(f'series: {series}')
    lines.append(f'gpus: {gpus}')
    lines.append('approximations:' + ('' if approx else ' []'))
    for a in approx: lines.append(f'  - {q(a)}')
    lines.append('not_modelled:' + ('' if notmod else ' []'))
    for a in notmod: lines.append(f'  - {q(a)}')
    lines.append('job:')
    for k, v in job: lines.append(f'  {k}: {v}')
    open(os.path.join(OUT, rid.lower() + '.yaml'), 'w').write('\n'.join(lines) + '\n')

FP16 = "fp16 simulated as bf16: the same A100 tensor-core peak (312 TFLOP/s) and element size"
LOCAL_DDP = "Megatron's local DDP all-reduces the gradients after the backward: one bucket of every gradient, not overlapped"
TORCH_DDP = "torch DDP: gradient buckets all-reduced as the backward completes them (25 MiB)"
# How tandem times FP8 GEMMs (docs/simulator.md, "Compute cost model").
FP8_SPEED = ("their bf16 time over the FP8-over-BF16 speedup measured at the power limit on one H100 (1.65-1.67 per "
             "GEMM role; Hopper's, taken for Blackwell too)")
FP8_TE = ("FP8 as tandem plans Transformer Engine's recipe: the blocks' GEMMs at " + FP8_SPEED + ", casts fused into the norms and activations or run as their own passes, weights cast once per "
          "step; the attention, embedding and LM head in bf16; the scaling recipe is not stated: NeMo's default, "
          "delayed scaling (fp8_scaling delayed), assumed")
TP_OVERLAP = ("TP communication overlap (NeMo's default) as tandem plans it: each sequence-parallel all-gather and "
              "reduce-scatter beside a GEMM pipelined with it in tensor_parallel chunks; the SMs Transformer Engine's "
              "userbuffers kernels take only as the generic slowdown of kernels beside a collective")
ATTN = ("Megatron's hidden dropout (0.1 after each block's two projections, fused with the bias and the residual "
        "add) not modelled: a byte of mask per hidden element written, and read in the backward")

# 1A: Megatron SC21 Table 1 (weak scaling, full recompute, seq 2048, V 51200)
A = [  # id L h a TP PP VP DP MBS GBS tflops step local_ddp
 ("A1", 24, 2304, 24, 1, 1, 1, 32, 16, 512, 137, 3.5, False),
 ("A2", 30, 3072, 32, 2, 1, 1, 32, 16, 512, 138, 3.7, False),
 ("A3", 36, 4096, 32, 4, 1, 1, 32, 16, 512, 142, 3.7, False),
 ("A4", 40, 6144, 48, 8, 1, 1, 32, 8, 1024, 135, 9.4, False),
 ("A5", 48, 8192, 64, 8, 2, 1, 32, 4, 1536, 138, 14.5, True),
 ("A6", 60, 10240, 80, 8, 4, 3, 32, 2, 1792, 140, 16.1, True),
 ("A7", 80, 12288, 96, 8, 8, 2, 24, 2, 2304, 148, 24.8, True),
 ("A8", 96, 16384, 128, 8, 16, 2, 15, 1, 2160, 155, 37.6, True),
 ("A9", 105, 20480, 128, 8, 35, 3, 9, 1, 2520, 163, 54.1, True),
 ("A10", 128, 25600, 160, 8, 64, 1, 6, 1, 3072, 163, 102.6, True),
]
for rid, L, h, a, tp, pp, vp, dp, mbs, gbs, tf, step, local in A:
    gpus = tp * pp * dp
    ga = gbs // (mbs * dp)
    assert ga * mbs * dp == gbs
    job = [('name', f'megatron-sc21-{rid.lower()}'),
           ('model', f'{{family: gpt2, vocab: 51200, seq_len: 2048, layers: {L}, hidden: {h}, heads: {a}, mlp_ratio: 4, tied_embeddings: true, attention_dropout: 0.1}}'),
           ('training', f'{{micro_batch: {mbs}, grad_accum: {ga}, precision: bf16}}')]
    par = f'data_parallel: {dp}, tensor_parallel: {tp}'
    if pp > 1: par += f', pipeline_parallel: {pp}'
    if vp > 1: par += f', pipeline_chunks: {vp}'
    job.append(('parallel', '{' + par + '}'))
    comm = 'bucket_mib: 1000000, first_bucket_mib: 1000000' if local else 'bucket_mib: 25, first_bucket_mib: 25'
    if pp > 1 and tp > 1: comm += ', pipeline_scatter_gather: true'  # SC21 section 4.1, Megatron's default
    job.append(('comm', '{' + comm + '}'))
    job.append(('schedule', '{weight_gradient_stream: false, materialized_attention: true}'))
    job.append(('recompute', '{policy: full}'))
    approx = [FP16, LOCAL_DDP if local else TORCH_DDP, ATTN]
    write(rid, f"GPT {L}/{h}/{a} on {gpus} A100 80GB (TP {tp}, PP {pp}" + (f", VP {vp}" if vp > 1 else "") + f", DP {dp}), full recompute",
          MEG_SRC, 'SEL', f'{gpus // 8}xdgx-a100', step, 'derived', MEG_NOTE.format(tf=tf), 'megatron-sc21-weak-scaling', gpus,
          approx, [], job, [f"Megatron-LM SC21 Table 1, row {rid}: batch {gbs} = micro-batch {mbs} x {ga} micro-batches x data parallel {dp}."])

# 1C: Korthikanti Table 5
C = [  # id L h a F GPUs TP PP VP MBS GBS full sel
 ("C1", 48, 6144, 64, 24576, 8, 8, 1, 1, 4, 4, 1.42, 1.10),
 ("C2", 96, 12288, 96, 49152, 64, 8, 8, 3, 1, 64, 18.13, 13.75),
 ("C3", 105, 20480, 128, 81920, 280, 8, 35, 3, 1, 280, 49.05, 37.83),
 ("C4", 128, 25600, 160, 102400, 512, 8, 64, 1, 1, 512, 94.42, 71.49),
]
for rid, L, h, a, F, gpus, tp, pp, vp, mbs, gbs, full, sel in C:
    ga = gbs // mbs
    for variant, step in (("full", full), ("sel", sel)):
        par = f'data_parallel: 1, tensor_parallel: {tp}'
        if variant == 'sel': par += ', sequence_parallel: true'
        if pp > 1: par += f', pipeline_parallel: {pp}'
        if vp > 1: par += f', pipeline_chunks: {vp}'
        job = [('name', f'korthikanti-{rid.lower()}-{variant}'),
               ('model', f'{{family: gpt2, vocab: 51200, seq_len: 2048, layers: {L}, hidden: {h}, heads: {a}, mlp_ratio: {F // h}, tied_embeddings: true, attention_dropout: 0.1}}'),
               ('training', f'{{micro_batch: {mbs}, grad_accum: {ga}, precision: bf16}}'),
               ('parallel', '{' + par + '}')]
        if pp > 1 and variant == 'full':  # Megatron's default scatter/gather; sequence parallel stages send their tokens
            job.append(('comm', '{pipeline_scatter_gather: true}'))
        job += [('schedule', '{materialized_attention: true}'),
               ('recompute', '{policy: full}' if variant == 'full' else '{policy: attention}')]
        approx = [FP16, ATTN]
        vtitle = "full recompute" if variant == 'full' else "sequence parallel + selective recompute"
        write(f'{rid}-{variant}', f"GPT {L}/{h}/{a} on {gpus} A100 (TP {tp}, PP {pp}" + (f", VP {vp}" if vp > 1 else "") + f"), {vtitle}",
              KOR_SRC, 'SEL', f'{max(1, gpus // 8)}xdgx-a100', step, 'printed',
              f"iteration time, {vtitle}; global batch {gbs}", '', gpus, approx, [], job,
              [f"Korthikanti et al. Table 5, row {rid} ({vtitle}). HW Selene [I]; 16-bit [I]."])

# 1F: dgxc Llama 3.1
LLAMA = {'8b': (32, 4096, 32, 8, 3.5), '70b': (80, 8192, 64, 8, 3.5)}
F = [  # id model GPUs TP PP VP CP DP MBS GBS GA prec step tokpers
 ("F1", '8b', 8, 1, 1, 1, 2, 4, 1, 128, 32, 'BF16', 12.27),
 ("F2", '8b', 128, 1, 1, 1, 2, 64, 1, 2048, 32, 'BF16', 12.33),
 ("F3", '8b', 8, 1, 1, 1, 2, 4, 1, 128, 32, 'FP8', 9.33),
 ("F4", '70b', 64, 4, 4, 5, 2, 2, 1, 128, 64, 'BF16', 14.66),
 ("F5", '70b', 2048, 4, 4, 5, 2, 64, 1, 4096, 64, 'BF16', 14.66),
 ("F6", '70b', 64, 4, 8, 5, 1, 2, 1, 128, 64, 'FP8', 9.86),
 ("F7", '70b', 2048, 4, 8, 5, 1, 64, 1, 4096, 64, 'FP8', 10.15),
]
for rid, m, gpus, tp, pp, vp, cp, dp, mbs, gbs, ga, prec, step in F:
    L, h, a, kv, r = LLAMA[m]
    notmod = []
    par = f'data_parallel: {dp}'
    if cp > 1: par += f', context_parallel: {cp}'
    par += f', tensor_parallel: {tp}'
    if tp > 1: par += ', sequence_parallel: true'
    if pp > 1: par += f', pipeline_parallel: {pp}'
    if vp > 1: par += f', pipeline_chunks: {vp}'
    par += ', shard_optimizer: true'
    approx = ["the distributed optimizer as ZeRO-1 (shard_optimizer)"] + ([TP_OVERLAP] if tp > 1 else [])
    if cp > 1:
        approx.append("context parallelism as tandem plans it: keys and values all-gathered over the group before the "
                      "attention (Llama 3's form); Transformer Engine passes them around a ring, overlapped with the "
                      "attention's chunks")
    job = [('name', f'dgxc-llama3.1-{m}-{rid.lower()}'),
           ('model', f'{{family: llama, vocab: 128256, seq_len: 8192, layers: {L}, hidden: {h}, heads: {a}, kv_heads: {kv}, mlp_ratio: {r}, tied_embeddings: false}}'),
           ('training', f'{{micro_batch: {mbs}, grad_accum: {ga}, precision: {prec.lower()}}}'),
           ('parallel', '{' + par + '}')]
    if tp > 1: job.append(('schedule', '{tp_comm_overlap: true}'))
    job.append(('recompute', '{policy: none}'))
    if prec == 'FP8': approx.append(FP8_TE)
    series = {'8b': 'dgxc-llama3.1-8b-bf16', '70b': 'dgxc-llama3.1-70b-' + prec.lower()}[m] if not (m == '8b' and prec == 'FP8') else ''
    write(rid, f"Llama 3.1 {m.upper()} on {gpus} H100 (TP {tp}, PP {pp}" + (f", VP {vp}" if vp > 1 else "") + f", CP {cp}, DP {dp}), {prec}",
          DGXC_SRC, 'EOS', f'{max(1, gpus // 8)}xdgx-h100', step, 'printed',
          f"step time printed (50 steps, synthetic data); global batch {gbs}, {ga} micro-batches of {mbs}", series, gpus,
          approx, notmod, job, [f"dgxc-benchmarking Llama 3.1 row {rid}."])

# 1F: Nemotron-4
N = [  # id model GPUs TP PP VP DP MBS GBS GA prec step seq L h a kv F
 ("F20", '340B', 256, 8, 8, 12, 4, 1, 64, 16, 'BF16', 4.606, 4096, 96, 18432, 96, 8, 73728),
 ("F21", '340B', 256, 8, 8, 12, 4, 1, 64, 16, 'FP8', 3.107, 4096, 96, 18432, 96, 8, 73728),
 ("F22", '15B', 16, 2, 1, 1, 8, 2, 64, 4, 'BF16', 2.746, 4096, 32, 6144, 48, 8, 24576),
]
for rid, m, gpus, tp, pp, vp, dp, mbs, gbs, ga, prec, step, s, L, h, a, kv, Fw in N:
    notmod = []
    par = f'data_parallel: {dp}, tensor_parallel: {tp}, sequence_parallel: true'
    if pp > 1: par += f', pipeline_parallel: {pp}'
    if vp > 1: par += f', pipeline_chunks: {vp}'
    par += ', shard_optimizer: true'
    job = [('name', f'dgxc-nemotron4-{m.lower()}-{rid.lower()}'),
           ('model', f'{{family: llama, mlp_activation: squared_relu, vocab: 256000, seq_len: {s}, layers: {L}, hidden: {h}, heads: {a}, kv_heads: {kv}, mlp_ratio: {Fw // h}, tied_embeddings: false}}'),
           ('training', f'{{micro_batch: {mbs}, grad_accum: {ga}, precision: {prec.lower()}}}'),
           ('parallel', '{' + par + '}'),
           ('schedule', '{tp_comm_overlap: true}'),
           ('recompute', '{policy: none}')]
    write(rid, f"Nemotron-4 {m} on {gpus} H100 (TP {tp}, PP {pp}" + (f", VP {vp}" if vp > 1 else "") + f", DP {dp}), {prec}",
          NEMO_SRC, 'EOS', f'{gpus // 8}xdgx-h100', step, 'printed',
          f"step time printed; global batch {gbs}, {ga} micro-batches of {mbs}; V = 256,000 is [R]", '', gpus,
          ["Nemotron-4's LayerNorm as tandem's RMSNorm (one pass over the activations each way either way)",
           "the distributed optimizer as ZeRO-1 (shard_optimizer)", TP_OVERLAP]
          + ([FP8_TE] if prec == 'FP8' else []),
          notmod, job, [f"dgxc-benchmarking Nemotron-4 row {rid} ({L} layers, width {h}, {a} heads, {kv} key/value heads, MLP {Fw}, squared ReLU)."])

# 1J: torchtitan, Tables 1 and 3: each row's three figures (BF16 eager, +
# torch.compile, + Float8) as three rows, each figure against the same
# setup but for what the technique changes.
J = [("J1", 8, (5762, 6667, 8532)), ("J2", 128, (5605, 6514, 8380))]
TT_COMMON = [
    "Meta's H100 96 GB HBM2e at its 500 W limit as the H100-96GB-500W model: HBM2e 2.4 TB/s as published, its "
    "peak interpolated in the power limit between the H100 NVL (400 W) and SXM (700 W) data sheets (886 TFLOP/s "
    "BF16); the makers say only that it lies between them",
    "Meta's three-level RoCE Clos as a two-level non-blocking fat tree with 400 Gb/s per GPU (ECMP routes)",
    "torchtitan's separate wq, wk, wv and w1, w3 GEMMs as projections separate, and its per-op selective "
    "checkpointing as alternate_gemms: every second GEMM rerun (k, o and up)",
    "FSDP2 as tandem's ZeRO-3 (shard_parameters), one bucket gathered ahead; the gradients reduce-scattered in bf16 "
    "(torchtitan's default reduces in fp32: twice the bytes, beside the backward)",
    "torch's scaled_dot_product_attention of December 2024 as FlashAttention-2 (attention_kernel flash2)"]
TT_TECH = {
    'eager': ("BF16 eager", "bf16", "eager", 0,
              ["eager PyTorch's RMSNorm, SwiGLU, rotary embedding, repeat_kv, output transpose and loss as their "
               "chains of kernels (elementwise eager), no epilogue fused into a GEMM"]),
    'compile': ("BF16, torch.compile", "bf16", "fused", 1,
                ["torch.compile's generated kernels as tandem's fused elementwise kernels (one per op; tandem also "
                 "fuses the residual add into the output projections' GEMMs, which Inductor leaves to cuBLAS)"]),
    'float8': ("torch.compile + Float8", "fp8", "fused", 2,
               ["torch.compile's generated kernels as tandem's fused elementwise kernels",
                "torchao's Float8 (tensorwise dynamic scaling of the blocks' linear layers) as tandem's FP8 GEMMs with "
                "current scaling: the blocks' GEMMs at " + FP8_SPEED + ", each input's amax pass and cast into both "
                "layouts as their own passes; the attention, embedding and LM head "
                "in bf16"])}
for base, gpus, tps_all in J:
    for tech, (label, prec, elementwise, i, extra) in TT_TECH.items():
        tps = tps_all[i]
        rid = base if tech == 'eager' else f"{base}-{tech}"
        step = round(2 * 8192 / tps, 3)
        job = [('name', f'torchtitan-llama3.1-8b-{rid.lower()}'),
               ('model', '{family: llama, vocab: 128256, seq_len: 8192, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, mlp_ratio: 3.5, tied_embeddings: false}'),
               ('training', f'{{micro_batch: 2, grad_accum: 1, precision: {prec}' + (', fp8_scaling: current' if prec == 'fp8' else '') + '}'),
               ('parallel', f'{{data_parallel: {gpus}, shard_parameters: true}}'),
               ('schedule', f'{{weight_gradient_stream: false, attention_kernel: flash2, elementwise: {elementwise}, projections: separate}}'),
               ('recompute', '{policy: alternate_gemms}')]
        write(rid, f"Llama 3.1 8B, FSDP over {gpus} H100 (96 GB HBM2e, 500 W), {label}, per-op selective recompute",
              TT_SRC, 'GT500', f'{gpus // 8}xgrand-teton-500w', step, 'derived',
              f"{tps} tokens/s per GPU printed ({label}, step 90); step = 2 x 8192 / {tps}",
              f'torchtitan-llama3.1-8b-fsdp' + ('' if tech == 'eager' else f'-{tech}'), gpus,
              TT_COMMON + extra, [], job,
              [f"torchtitan row {base} ({label}): seq 8192 [I], local batch 2."])
# torchtitan's Llama 3 runs on 64 A100 80GB (docs/performance.md): not
# rows of the reference, checked as well. The torchtitan of mid-2024 ran
# eager (compile off in its configs) and its SDPA ran FlashAttention-2,
# the A100's fused kernel.
TT_A100_SRC = ("pytorch/torchtitan docs/performance.md @0413364 (Llama 3 on 64 A100 80GB, FSDP2, local batch 1, "
               "seq 8192)")
TT_A100 = [("TT-A100-8B", "8B", 32, 4096, 32, 2973, 'alternate_gemms', "selective op", "58.2%"),
           ("TT-A100-70B", "70B", 80, 8192, 64, 331, 'full', "full", "51.7%")]
for rid, size, L, h, a, wps, policy, ac, mfu in TT_A100:
    job = [('name', f'torchtitan-llama3-{size.lower()}-a100'),
           ('model', f'{{family: llama, vocab: 128256, seq_len: 8192, layers: {L}, hidden: {h}, heads: {a}, kv_heads: 8, mlp_ratio: 3.5, tied_embeddings: false}}'),
           ('training', '{micro_batch: 1, grad_accum: 1, precision: bf16}'),
           ('parallel', '{data_parallel: 64, shard_parameters: true}'),
           ('schedule', '{weight_gradient_stream: false, attention_kernel: flash2, elementwise: eager, projections: separate}'),
           ('recompute', f'{{policy: {policy}}}')]
    write(rid, f"Llama 3 {size}, FSDP over 64 A100 80GB, eager, {ac} activation checkpointing (not in the reference)",
          TT_A100_SRC, 'A100', '8xdgx-a100', round(8192 / wps, 3), 'derived',
          f"{wps} tokens/s per GPU printed (MFU {mfu}); step = 1 x 8192 / {wps}", '', 64,
          ["the cluster's network is not stated: DGX A100 hosts (NVSwitch, 8 x 200 Gb/s HDR InfiniBand) assumed",
           "eager PyTorch's RMSNorm, SwiGLU, rotary embedding, repeat_kv, output transpose and loss as their chains "
           "of kernels (elementwise eager); SDPA's FlashAttention-2 as the A100's fused attention",
           "FSDP2 as tandem's ZeRO-3 (shard_parameters), one bucket gathered ahead; the gradients reduce-scattered in "
           "bf16 (torchtitan's default reduces in fp32)"]
          + ["torchtitan's separate wq, wk, wv and w1, w3 GEMMs as projections separate"]
          + (["torchtitan's per-op selective checkpointing as alternate_gemms: every second GEMM rerun (k, o and up)"]
             if policy == 'alternate_gemms' else []),
          [], job, [f"torchtitan's Llama 3 {size} on 64 A100 ({ac} AC): not a row of the reference."],
          in_reference=False)
# Megatron-Bridge's pre-training table of the 25.11 NeMo container
# (DGX-GB300, DGX-GB200, DGX-B200, DGX-H100): not rows of the reference,
# checked as well. Its dense Llama rows; the mixture-of-experts rows
# (DeepSeek V3, GPT-OSS, Qwen3 MoE) are not listed: tandem plans no experts.
MB_SRC = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @00b7660b (25.11 NeMo container, pre-training)"
MB_MODELS = {'8B': (32, 4096, 32, 3.5), '70B': (80, 8192, 64, 3.5), '405B': (126, 16384, 128, 3.25)}
MB_SYSTEMS = {'GB300': ('gb300-nvl72', 72, 'GB'), 'GB200': ('gb200-nvl72', 72, 'GB'),
              'B200': ('dgx-b200', 8, 'B'), 'H100': ('dgx-h100', 8, 'DGXH')}
MB = [  # system, model, gpus, gbs, mbs, fsdp, tp, pp, cp, vp, tokens/s/GPU
    ('GB300', '8B', 8, 128, 2, 0, 1, 1, 1, 1, 37556), ('GB300', '70B', 64, 256, 2, 1, 1, 1, 1, 1, 4520),
    ('GB300', '405B', 256, 1536, 1, 0, 2, 8, 2, 4, 999),
    ('GB200', '8B', 8, 128, 2, 0, 1, 1, 1, 1, 31508), ('GB200', '70B', 64, 256, 2, 1, 1, 1, 1, 1, 4312),
    ('GB200', '405B', 256, 1536, 1, 0, 4, 16, 1, 4, 813),
    ('B200', '8B', 8, 128, 2, 0, 1, 1, 1, 1, 30624), ('B200', '405B', 128, 64, 1, 0, 4, 8, 2, 8, 661),
    ('H100', '8B', 8, 128, 1, 1, 1, 1, 1, 1, 14451), ('H100', '70B', 64, 128, 1, 0, 4, 8, 1, 5, 1602),
    ('H100', '405B', 1024, 512, 1, 0, 8, 8, 2, 8, 292)]
for system, size, gpus, gbs, mbs, fsdp, tp, pp, cp, vp, tps in MB:
    rid = f"MB-{system}-{size}"
    L, h, a, r = MB_MODELS[size]
    preset, per_host, hw = MB_SYSTEMS[system]
    dp = gpus // (tp * pp * cp)
    ga = gbs // (dp * mbs)
    assert dp * mbs * ga == gbs
    par = (f'data_parallel: {dp}, tensor_parallel: {tp}, sequence_parallel: {"true" if tp > 1 else "false"}, '
           f'pipeline_parallel: {pp}, context_parallel: {cp}')
    if vp > 1: par += f', pipeline_chunks: {vp}'
    par += ', shard_parameters: true' if fsdp else ', shard_optimizer: true'
    approx = ["FP8 with current scaling (FP8-CS, fp8_scaling current) as tandem's FP8 GEMMs: " + FP8_SPEED +
              "; each input's amax pass, then its cast into both layouts",
              "activation recompute and offloading of the recipe are not in the table: none planned"]
    if fsdp: approx.append("Megatron-FSDP as tandem's ZeRO-3 (shard_parameters), one bucket gathered ahead")
    else: approx.append("the distributed optimizer as ZeRO-1 (shard_optimizer)")
    if tp > 1: approx.append(TP_OVERLAP)
    if system in ('GB300', 'GB200', 'B200'):
        approx.append("Blackwell's kernel efficiencies taken as Hopper's (the roofline defaults): no Blackwell "
                      "measurement; GB300's doubled exponential rate for the attention's softmax not modelled")
    if system in ('GB300', 'GB200'):
        approx.append(f"DGX-{system} as NVL72 racks ({preset}): the GPUs of a rack on one NVLink switch domain, one "
                      "NIC per GPU")
    layers = ''
    if L % (pp * vp) != 0:
        chunks = pp * vp
        per = (L + 2) // chunks
        split = [per - 1] + [per] * (chunks - 2) + [per - 1]
        assert sum(split) == L
        layers = ', pipeline_layers: [' + ', '.join(map(str, split)) + ']'
        approx.append("126 blocks over the pipeline's chunks with the embedding and the loss counted as a block each "
                      "(Megatron's account_for_embedding/loss_in_pipeline_split) [I]")
    job = [('name', f'megatron-bridge-llama3-{size.lower()}-{system.lower()}'),
           ('model', f'{{family: llama, vocab: 128256, seq_len: 8192, layers: {L}, hidden: {h}, heads: {a}, kv_heads: 8, mlp_ratio: {r}, tied_embeddings: false}}'),
           ('training', f'{{micro_batch: {mbs}, grad_accum: {ga}, precision: fp8, fp8_scaling: current}}'),
           ('parallel', '{' + par + layers + '}'),
           ('schedule', f'{{tp_comm_overlap: {"true" if tp > 1 else "false"}}}'),
           ('recompute', '{policy: none}')]
    hosts = (gpus + per_host - 1) // per_host
    write(rid, f"Llama 3{'.1' if size == '405B' else ''} {size} on {gpus} {system} (TP {tp}, PP {pp}, CP {cp}"
          + (f", VP {vp}" if vp > 1 else "") + f", {'FSDP' if fsdp else 'DP'} {dp}), FP8-CS (not in the reference)",
          MB_SRC, hw, f'{hosts}x{preset}', round(gbs * 8192 / (tps * gpus), 3), 'derived',
          f"{tps} tokens/s per GPU printed; step = {gbs} x 8192 / ({tps} x {gpus})", '', gpus, approx, [], job,
          [f"Megatron-Bridge 25.11 pre-training, DGX-{system}, Llama {size}: not a row of the reference."],
          in_reference=False)
print('written', len(os.listdir(OUT)))
