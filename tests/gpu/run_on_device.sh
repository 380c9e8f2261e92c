#!/bin/bash
# Runs the GPU tests, the CLI and the benchmark on a GPU machine from a folder
# of prebuilt binaries (DIST: bin/, lib/, peers/), logging each stage to OUT.
#   tests/gpu/run_on_device.sh DIST OUT STAGE...
# Stages: kernels executor memory dp2 profiler facts overhead cli cli2 oom gpt2 gpt2eager kill peers bench
#         benchonly bench2 scaling geluforward geluclocks mergedmemset energy
#         attnenergy fusebias residual lmhead lmheadmemory svr svr1 twogpu
#         llama llamapeers wide sweep sweepagain heldout unseen long setup zero2 pytorchtrace checkpoint checkpoint2
#         checkpointkill ckptcost replicacheck replicacheck2 fp8gemm fp8run fp8llama7b materialized rankspergpu multigpu normbwd fp8writers fp8walks sweepfp8
#         wgstream wgprofile kernelpairs census
# twogpu is what issues 5 and 8 still need from two GPUs (about 9 minutes:
# split it over two calls, `dp2 kill scaling` and `bench2 svr`, where a call
# is limited to 10).
set -u
DIST=$(cd "$1" && pwd); OUT=$2; shift 2
export LD_LIBRARY_PATH=$DIST/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# The binaries look for resources under the source folder they were built in.
if [ ! -e /work/main/resources ]; then mkdir -p /work && rm -rf /work/main && ln -s "$PWD" /work/main; fi
B=$DIST/bin
# GPT-2 124M's (or the job file's in $2) losses, gradient norms and learning
# rates over 20 steps with and without the CUDA Graph, optionally under one
# --set overrides (KEY=VALUE words), compared. Two processes: GEMM algorithm timing may choose
# differently in each, so it is off (docs/gpu-executor.md, GEMM algorithm timing).
# RUN_EXTRA: more arguments of tandem run (e.g. --ranks-per-gpu 2).
graph_vs_eager() {
  local set=() tag=${1:-default} job=${2:-resources/jobs/gpt2-124m-dp8.yaml} gpus=${3:-1}
  for kv in $1; do set+=(--set "$kv"); done
  local name=$(basename "$job" .yaml).${tag//[^a-z_]/_}
  for mode in graph eager; do
    TANDEM_GEMM_TUNING=0 $B/tandem run "$job" --gpus $gpus --steps 20 --json "${set[@]}" ${RUN_EXTRA:-} \
      $([ $mode = eager ] && echo --eager) | grep '"step"' | sed 's/,"ms".*//' > "$OUT/$mode.$name.jsonl"
  done
  local g="$OUT/graph.$name.jsonl" e="$OUT/eager.$name.jsonl"
  echo "=== graph vs eager ($(basename "$job" .yaml), $tag): $(wc -l < "$g") graph steps, $(wc -l < "$e") eager steps"
  if cmp -s "$g" "$e"; then echo "graph == eager (loss, norm, lr) over 20 steps"; else echo "graph != eager"; diff "$g" "$e" | head; fi
  tail -n 1 "$g"
}
# A job field's values (false and true unless named), alternating three
# times: step time (bench_gpt2_h200 --steps 40), then kernel time per kind
# (--breakdown) and a step's energy by kind (bench_energy_by_op) for each.
alternate() {
  local name=$1 field=$2; shift 2
  local values=("$@")
  [ ${#values[@]} -eq 0 ] && values=(false true)
  for i in 1 2 3; do
    for f in "${values[@]}"; do
      stage ${name}_${f}_$i $B/bench_gpt2_h200 --steps 40 --set $field=$f
    done
  done
  for f in "${values[@]}"; do
    stage ${name}_breakdown_$f $B/bench_gpt2_h200 --steps 30 --breakdown --set $field=$f
    stage ${name}_energy_$f $B/bench_energy_by_op --seconds 1 --set $field=$f
  done
}
stage() {
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$(date +%s.%N)
  timeout ${STAGE_TIMEOUT:-400} "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.log"
  echo "=== $name rc=$rc wall=$(python3 -c "import time; print(round(time.time() - $t0, 1))")s"
}
nvidia-smi -L
# The sweep and the held-out stages work with the machine's own GPU: its
# shipped profile, its topology, and the calibration whose multi-rank keys
# a new sweep keeps (an H100 is swept and checked as an H100).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
  *H100*) GPU=h100 GPU_TOPO=dgx-h100 GPU_MULTI_RANK=resources/calibration/h100.yaml ;;
  *) GPU=h200 GPU_TOPO=h200x2-nv18 GPU_MULTI_RANK=resources/calibration/h200x2-nv18.yaml ;;
esac
GPU_CAL=resources/calibration/$GPU.yaml
for s in "$@"; do
  case $s in
    kernels) stage kernels $B/gpu_test_kernels ;;
    executor) stage executor $B/gpu_test_executor ;;
    memory) stage memory $B/gpu_test_memory ;;
    dp2) stage dp2 $B/gpu_test_data_parallel ;;
    profiler)
      stage profiler_executor $B/gpu_test_profiler_executor
      stage profiler_collector $B/gpu_test_profiler_collector ;;
    cli) stage cli $B/tandem run tiny --steps 30 ;;
    cli2) stage cli2 $B/tandem run tiny --gpus 2 --steps 30 ;;
    oom) stage oom $B/tandem run resources/jobs/gpt2-1.5b.yaml --gpus 1 --set training.micro_batch=256 --steps 2 ;;
    gpt2) stage gpt2 $B/tandem run resources/jobs/gpt2-124m-dp8.yaml --gpus 1 --steps 20 --out /tmp/run.sqlite
      python3 -c "import sqlite3; c = sqlite3.connect('/tmp/run.sqlite'); print('trace tables:', [r[0] for r in c.execute(\"select name from sqlite_master where type='table'\")]); print('memory stats:', list(c.execute(\"select name, value from stats where name like '%bytes'\")))" ;;
    facts)
      # A profiled run keeps its plan facts (trace schema 2): calibrate reads
      # the stored plan (no "planned again" note), the calibrated simulation
      # lands beside it, and compare sets the two side by side.
      rm -f /tmp/facts.sqlite*
      stage facts_run $B/tandem run default --gpus 1 --steps 20 --profile --out /tmp/facts.sqlite
      python3 -c "import sqlite3; c = sqlite3.connect('/tmp/facts.sqlite'); print('schema', c.execute('pragma user_version').fetchone(), 'recompute rows', c.execute('select count(*) from run_recompute').fetchone(), 'memory rows', list(c.execute('select program, arena_bytes, gpu_run_bytes from run_memory')), 'plans', list(c.execute('select run, encoding, length(plan) from run_plans')), 'runs', list(c.execute('select id, kind, tool_version, plan_format from runs')))"
      stage facts_calibrate $B/tandem calibrate /tmp/facts.sqlite --out /tmp/facts-cal.yaml
      stage facts_simulate $B/tandem simulate default --set parallel.data_parallel=1 --topology h200x2-nv18 \
        --calibration /tmp/facts-cal.yaml --out /tmp/facts.sqlite
      stage facts_compare $B/tandem compare /tmp/facts.sqlite --real 1 --sim 2
      stage facts_report $B/tandem report /tmp/facts.sqlite --run 1 ;;
    overhead) stage overhead $B/bench_profiler_overhead --gpus 1 --steps 30 ;;
    gpt2eager)
      # GPT-2 124M: CUDA Graph and eager losses over 20 steps must be identical.
      graph_vs_eager "" ;;
    kill)
      # Kill rank 1 of a 2-GPU run mid-training; the launch must end, non-zero, within 60 s.
      echo "=== kill"
      ( $B/tandem run tiny --gpus 2 --steps 1000000 --timeout 20 > $OUT/kill.log 2>&1; echo "launch rc=$?" >> $OUT/kill.log ) &
      sleep 15
      victim=$(pgrep -f "tandem run tiny" | while read p; do if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -q '^TANDEM_RANK=1$'; then echo $p; fi; done | head -1)
      if [ -z "$victim" ]; then echo "no rank 1 process found to kill (the launch did not start?)"
      else echo "killing rank 1 (pid $victim) at $(date +%s)"; kill -9 $victim; fi; t0=$(date +%s)
      wait; [ -n "$victim" ] && echo "launch ended $(( $(date +%s) - t0 )) s after the kill"; tail -n 8 $OUT/kill.log ;;
    bench) stage bench $B/bench_gpt2_h200 --steps 30 --peer $DIST/peers/gpt2_torch.py ;;
    benchonly) stage benchonly $B/bench_gpt2_h200 --steps 30 --breakdown ;;
    peers)
      # Issue 5's point 3 as quoted: three rounds of 40 steps against the
      # PyTorch peers, in turns.
      stage peers $B/bench_gpt2_h200 --steps 40 --rounds 3 --peer $DIST/peers/gpt2_torch.py ;;
    bench2) stage bench2 $B/bench_gpt2_h200 --steps 30 --gpus 2 --peer $DIST/peers/gpt2_torch.py ;;
    scaling)
      # Two-GPU scaling (GPU 0 alone, GPU 1 alone, both), with NCCL's default
      # number of CTAs and then capped: kernels beside an all-reduce run 4-8%
      # slower (docs/benchmarks.md), and fewer NCCL CTAs leave them more SMs.
      for ctas in default 8 4; do
        if [ $ctas = default ]; then unset NCCL_MAX_CTAS; else export NCCL_MAX_CTAS=$ctas; fi
        stage scaling_$ctas $B/bench_gpt2_h200 --steps 40 --scaling --set parallel.shard_optimizer=true
      done
      unset NCCL_MAX_CTAS ;;
    geluforward)
      # Our GELU GEMM for the forward (TANDEM_GELU_GEMM=forward, the default
      # on Hopper): the executor tests, graph == eager on GPT-2, the kernels
      # against cuBLASLt's, and whole steps alternating with cuBLASLt's
      # epilogues, then against the peer.
      TANDEM_GELU_GEMM=forward stage executor_forward $B/gpu_test_executor
      for m in graph eager; do
        f=""; [ $m = eager ] && f="--eager"
        TANDEM_GELU_GEMM=forward TANDEM_GEMM_TUNING=0 $B/tandem run resources/jobs/gpt2-124m-dp8.yaml --gpus 1 \
          --steps 20 --json $f | grep '"step"' | sed 's/,"ms".*//' > $OUT/forward_$m.jsonl
      done
      if cmp -s $OUT/forward_graph.jsonl $OUT/forward_eager.jsonl; then echo "forward: graph == eager over 20 steps"
      else echo "forward: graph != eager"; fi
      tail -n 1 $OUT/forward_graph.jsonl
      stage gelu_gemm $B/bench_gelu_gemm --rounds 7
      for i in 1 2; do
        for p in forward cublaslt; do
          TANDEM_GELU_GEMM=$p stage step_${p}_$i $B/bench_gpt2_h200 --steps 40
        done
      done
      TANDEM_GELU_GEMM=forward stage peer_forward $B/bench_gpt2_h200 --steps 40 --rounds 3 \
        --peer $DIST/peers/gpt2_torch.py ;;
    geluclocks)
      # The GELU GEMMs' SM clock and power per candidate, in short and long
      # bursts: does the epilogues' memory traffic hold the clock down?
      stage gelu_clocks_50 $B/bench_gelu_gemm --rounds 7 --reps 50
      stage gelu_clocks_500 $B/bench_gelu_gemm --rounds 5 --reps 500 ;;
    mergedmemset)
      # Where the merged cuBLASLt memsets go in the step graph
      # (TANDEM_GRAPH_MERGED_MEMSET): before the graph's roots (the default)
      # or before each GEMM that had one; step time alternating three times,
      # then a profile of each for the gaps before cuBLASLt's kernels.
      for i in 1 2 3; do
        for c in roots users; do TANDEM_GRAPH_MERGED_MEMSET=$c stage merged_${c}_$i $B/bench_gpt2_h200 --steps 40; done
      done
      for c in roots users; do
        TANDEM_GRAPH_MERGED_MEMSET=$c stage merged_profile_$c $B/tandem run resources/jobs/gpt2-124m-dp8.yaml \
          --gpus 1 --steps 12 --profile --out $OUT/merged_$c.sqlite
        stage merged_report_$c $B/tandem report $OUT/merged_$c.sqlite
      done ;;
    energy)
      # Where a step's energy goes, by kind of work, and the whole step's
      # (bench_energy_by_op: at the power cap a step's time is its energy
      # divided by the cap).
      stage energy $B/bench_energy_by_op --seconds 1 ;;
    attnenergy)
      # The attention kernels' energy alone, three rounds in turns (about
      # 20 s): where an attention change shows first, to 0.5%.
      stage attnenergy $B/bench_energy_by_op --kind attention --kind attention_bwd --rounds 3 ;;
    fusebias)
      # The bias gradients summed by the layernorm and attention backward
      # (schedule.fuse_bias_gradients) against the default (docs/benchmarks.md,
      # seventeenth session: 0.07-0.21 ms less on one machine, neutral on another).
      alternate fusebias schedule.fuse_bias_gradients ;;
    residual)
      # The residual add in the projection GEMM (schedule.residual_in_gemm,
      # the default) against the add+layernorm kernel; then graph == eager
      # with the add+layernorm kernel (gpt2eager has the default).
      alternate residual schedule.residual_in_gemm
      graph_vs_eager schedule.residual_in_gemm=false ;;
    lmhead)
      # The LM head in 8 groups of tokens (schedule.lm_head_chunks) against
      # one; then graph == eager with the groups.
      alternate lmhead schedule.lm_head_chunks 1 8
      graph_vs_eager schedule.lm_head_chunks=8 ;;
    lmheadmemory)
      # Memory against step time: the LM head in 4 and 16 groups, selective
      # recompute, and both, against the default; two rounds in turns (the
      # planned arena is in each line).
      for i in 1 2; do
        for set in schedule.lm_head_chunks=1 schedule.lm_head_chunks=4 schedule.lm_head_chunks=16 \
            recompute.policy=selective "recompute.policy=selective --set schedule.lm_head_chunks=16"; do
          stage lmheadmemory_${i}_${set//[^a-z0-9]/_} $B/bench_gpt2_h200 --steps 40 --set $set
        done
      done ;;
    svr)
      # Sim-vs-real over every job of bench/sim_vs_real.cpp, the two-GPU ones
      # included (docs/accuracy.md); the real traces stay in OUT/svr.
      stage svr $B/bench_sim_vs_real $B/tandem $OUT/svr --steps 20 ;;
    svr1)
      # Sim-vs-real on one GPU: the compute keys refitted, the multi-rank
      # keys kept from the committed calibration; the fit, the table and
      # the calibration jobs' traces (to analyse again without a GPU) kept.
      stage svr1 $B/bench_sim_vs_real $B/tandem /tmp/svr1 --steps 20 --max-dp 1 \
        --multi-rank-from resources/calibration/h200x2-nv18.yaml
      mkdir -p $OUT/svr1 && cp /tmp/svr1/calibration.yaml /tmp/svr1/*.log $OUT/svr1/ 2>/dev/null
      tar cJf $OUT/svr1/real-traces.tar.xz -C /tmp/svr1 $(cd /tmp/svr1 && ls *.real.sqlite) ;;
    twogpu)
      # Issue 5's data-parallel correctness, kill test, scaling and DDP peer,
      # and issue 8's two-GPU sim-vs-real, in the order of their cost.
      bash "$0" "$DIST" "$OUT" dp2 kill scaling bench2 svr ;;
    llama)
      # The Llama family on one GPU: its kernels against the CPU reference,
      # `tandem run` of llama-124m (with a trace), graph == eager, the
      # per-kind breakdown, and Llama 2 7B refused in one line (heads 128 wide).
      stage llama_kernels $B/gpu_test_kernels_llama
      stage llama_run $B/tandem run resources/jobs/llama-124m.yaml --steps 20 --out /tmp/llama.sqlite
      graph_vs_eager "" resources/jobs/llama-124m.yaml
      stage llama_breakdown $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml --steps 30 --breakdown
      stage llama2_7b_refused $B/tandem run llama2-7b --gpus 1 ;;
    llamapeers)
      # llama-124m against the Llama peer (PyTorch eager, torch.compile),
      # three rounds in turn.
      stage llama_peers $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml --steps 40 --rounds 3 \
        --peer $DIST/peers/llama_torch.py ;;
    wide)
      # Heads 128 wide (Llama 2 and 3): Llama 2 7B on one GPU (parameters
      # not sharded: one rank), llama-124m with 6 heads of 128 (graph ==
      # eager, breakdown, against the PyTorch peer, two rounds).
      stage llama2_7b $B/tandem run llama2-7b --gpus 1 --steps 4 --set parallel.shard_parameters=false
      local_set="model.heads=6 model.kv_heads=2"
      graph_vs_eager "$local_set" resources/jobs/llama-124m.yaml
      stage wide_breakdown $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml --steps 30 --breakdown \
        --set model.heads=6 --set model.kv_heads=2
      stage wide_peers $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml --steps 40 --rounds 2 \
        --set model.heads=6 --set model.kv_heads=2 --peer $DIST/peers/llama_torch.py ;;
    sweep|sweepagain)
      # The kernel sweep (issue 49): every point of the full grid run and
      # profiled at the GPU's steady state (--warm-seconds), the calibration
      # fitted there (multi-rank keys kept from the two-GPU fit); the fit, the
      # points' logs and the two runs with the weight-gradient stream come back
      # (kernel_overlap_efficiency can be refitted from them after a change to
      # the replay; the other traces are too large). sweepagain
      # is the same on another machine of the kind, for the agreement of two
      # sweeps. 3-6 minutes on one H200 (51 points in 219-231 s on one H100),
      # then the GEMM census (stage census; CENSUS_TIME_LIMIT, 150 s here);
      # SWEEP_TIME_LIMIT: start no point after this many seconds (400).
      mkdir -p $OUT/$s
      STAGE_TIMEOUT=590 stage $s $B/tandem calibrate --sweep full --out $OUT/$s/$GPU.yaml --work-dir /tmp/$s \
        --warm-seconds 1.5 --time-limit ${SWEEP_TIME_LIMIT:-400} --multi-rank-from $GPU_MULTI_RANK --topology $GPU_TOPO \
        --census-time-limit ${CENSUS_TIME_LIMIT:-150}
      tar cJf $OUT/$s/logs.tar.xz -C /tmp $s --exclude '*.sqlite'
      (cd /tmp/$s && tar cJf $OUT/$s/beside.tar.xz $(ls *-beside.sqlite)) ;;
    census)
      # Issue 49: the GEMM census (which kernel the executor gets for each
      # GEMM of a dense grid of shapes: simulator/calibrate/gemm_census.h)
      # added to this GPU's shipped profile, after the GPU test of the smoke
      # grid; the census's trace comes back packed. CENSUS_TIME_LIMIT: tune
      # no shape after this many seconds (300).
      stage gemm_census_test $B/gpu_test_profiler_gemm_census
      mkdir -p $OUT/census
      STAGE_TIMEOUT=480 stage census $B/tandem calibrate --gemm-census $GPU_CAL --out $OUT/census/$GPU.yaml \
        --census-time-limit ${CENSUS_TIME_LIMIT:-300}
      xz -T4 -f $OUT/census/$GPU.yaml.gemm-census.sqlite ;;
    rankspergpu)
      # Issue 53: multi-rank plans with every rank on one GPU in one process
      # (in-process collectives): gradients and 20-step losses against the
      # CPU reference (tensor, sequence, data and hybrid parallelism), then
      # the CLI on tensor parallelism 2 with and without sequence parallelism.
      stage ranks_per_gpu $B/gpu_test_ranks_per_gpu
      stage tp2_cli $B/tandem run tiny --set parallel.tensor_parallel=2 --ranks-per-gpu 2 --steps 20
      stage tp2sp_llama_cli $B/tandem run llama-124m --set parallel.tensor_parallel=2 \
        --set parallel.sequence_parallel=true --set training.micro_batch=4 --ranks-per-gpu 2 --steps 10
      # Issue 53 point 2 through the CLI: one CUDA Graph for both ranks'
      # steps against eager steps, GPT-2 124M under TP 2 + SP and tiny
      # GPT-2 under PP 2 interleaved.
      RUN_EXTRA="--ranks-per-gpu 2" graph_vs_eager "parallel.tensor_parallel=2 parallel.sequence_parallel=true \
        parallel.data_parallel=1 training.micro_batch=8" resources/jobs/gpt2-124m-dp8.yaml 1
      RUN_EXTRA="--ranks-per-gpu 2" graph_vs_eager "parallel.pipeline_parallel=2 parallel.pipeline_chunks=2 \
        training.grad_accum=4 model.layers=4" resources/jobs/gpt2-tiny.yaml 1
      # Issue 53 point 4: TP 2 x PP 2 profiled with every rank on this GPU
      # (one profiler, each rank's records under its rank): kernels with a
      # task per rank (the set-up track, 998, left out), then the report.
      rm -f /tmp/tp2pp2.sqlite
      stage tp2pp2_profiled $B/tandem run tiny --set parallel.tensor_parallel=2 --set parallel.pipeline_parallel=2 \
        --set training.grad_accum=2 --ranks-per-gpu 4 --steps 10 --profile --out /tmp/tp2pp2.sqlite
      stage tp2pp2_per_rank python3 -c "import sqlite3, sys
for r, n, t in sqlite3.connect(sys.argv[1]).execute('select rank, count(*), sum(task_id >= 0) from activities '
    'where kind = 0 and stream != 998 group by rank'): print('rank', r, 'kernels', n, 'with a task', t)" /tmp/tp2pp2.sqlite
      stage tp2pp2_report $B/tandem report /tmp/tp2pp2.sqlite ;;
    multigpu)
      # Issue 53 on a machine of several GPUs (the NCCL path; not run yet: no
      # such machine lent): the ranks-per-GPU checks over NCCL (a GPU per
      # rank, cases beyond the visible GPUs skipped), CUDA Graph == eager for
      # TP 2 + SP and PP 2 interleaved, TP 2 against DP 2 on GPT-2 350M, and
      # TP 2's real run profiled beside its simulation, task by task.
      stage nccl_parallel $B/gpu_test_ranks_per_gpu --nccl
      for kv in "parallel.tensor_parallel=2 parallel.sequence_parallel=true" \
                "parallel.pipeline_parallel=2 parallel.pipeline_chunks=2 training.grad_accum=4 model.layers=4"; do
        graph_vs_eager "$kv" resources/jobs/gpt2-tiny.yaml 2
      done
      for layout in "--set parallel.tensor_parallel=2" ""; do
        stage "gpt2_350m_2gpu${layout:+_tp2}" $B/tandem run gpt2-350m --gpus 2 --steps 30 --json $layout
      done
      stage tp2_profiled $B/tandem run gpt2-350m --gpus 2 --steps 20 --set parallel.tensor_parallel=2 --profile \
        --out /tmp/tp2.real.sqlite
      stage tp2_simulated $B/tandem simulate gpt2-350m --set parallel.tensor_parallel=2 --set parallel.data_parallel=1 \
        --topology h200x2-nv18 --out /tmp/tp2.sim.sqlite
      stage tp2_compare $B/tandem compare /tmp/tp2.real.sqlite /tmp/tp2.sim.sqlite ;;
    heldout)
      # Issue 49's held-out jobs (bench_sim_vs_real --jobs scale): run and
      # profiled for real; simulated with the machine's shipped profile
      # (analyse again anywhere with --no-run); traces packed.
      STAGE_TIMEOUT=540 stage heldout $B/bench_sim_vs_real $B/tandem /tmp/heldout --steps 20 --jobs scale \
        --calibration $GPU_CAL --topology $GPU_TOPO --max-dp 1 ${HELDOUT_ONLY:+--only $HELDOUT_ONLY}
      mkdir -p $OUT/heldout
      tar cf - -C /tmp/heldout $(cd /tmp/heldout && ls *.real.sqlite *.log) | xz -T16 -6 | split -b 15m - $OUT/heldout/traces.tar.xz. ;;
    unseen|long)
      # More job sets run and profiled the same way (bench_sim_vs_real
      # --jobs unseen: six jobs of shapes no grid point has, 20 steps; --jobs
      # long: five past the grid's longest sequences, 16384-65536, 12 steps);
      # analyse with --no-run.
      steps=20; [ $s = long ] && steps=12
      STAGE_TIMEOUT=300 stage $s $B/bench_sim_vs_real $B/tandem /tmp/$s --steps $steps --jobs $s \
        --calibration $GPU_CAL --topology $GPU_TOPO --max-dp 1
      mkdir -p $OUT/$s
      tar cf - -C /tmp/$s $(cd /tmp/$s && ls *.real.sqlite *.log) | xz -T16 -6 > $OUT/$s/traces.tar.xz ;;
    setup)
      # Issue 52: tandem run's set-up three ways (initial weights drawn on
      # the host, no plan or GEMM cache: as before; drawn on the device with
      # the caches cold; the caches warm), GPT-2 124M and Llama 2 7B.
      C=/tmp/tandem-caches; rm -rf $C; mkdir -p $C
      for job in default llama2-7b; do
        extra=(); [ $job = llama2-7b ] && extra=(--set parallel.shard_parameters=false)
        stage setup_${job}_host env TANDEM_HOST_INIT=1 TANDEM_GEMM_CACHE=off $B/tandem run $job --gpus 1 --steps 3 \
          --json --plan-cache off "${extra[@]}"
        for temp in cold warm; do
          stage setup_${job}_$temp env TANDEM_GEMM_CACHE=$C/gemm $B/tandem run $job --gpus 1 --steps 3 --json \
            --plan-cache $C/plans "${extra[@]}"
        done
      done ;;
    zero2)
      # Issue 52: ZeRO-2 (one shard) against the unsharded optimizer and
      # ZeRO-3 on one H200, 20 steps, losses side by side; and a placement
      # map applied (the run's stats record it).
      for s2 in "parallel.shard_optimizer=true" "parallel.shard_gradients=true" "parallel.shard_parameters=true"; do
        n=${s2%%=*}; n=${n#parallel.}
        stage zero2_$n $B/tandem run default --gpus 1 --steps 20 --json --set $s2 > /dev/null
        grep '^{"step":' $OUT/zero2_$n.log | sed 's/,"ms".*//' > $OUT/zero2_$n.jsonl
        echo "$n: $(wc -l < $OUT/zero2_$n.jsonl) steps, last $(tail -n 1 $OUT/zero2_$n.jsonl), $(grep -o '"median_ms":[0-9.]*' $OUT/zero2_$n.log)"
      done
      for n in shard_gradients shard_parameters; do
        if cmp -s $OUT/zero2_shard_optimizer.jsonl $OUT/zero2_$n.jsonl; then echo "$n == shard_optimizer (loss, norm, lr) over 20 steps"
        else echo "$n != shard_optimizer"; diff $OUT/zero2_shard_optimizer.jsonl $OUT/zero2_$n.jsonl | head -4; fi
      done
      $B/tandem place default --topology h200x2-nv18 --set parallel.data_parallel=1 --out /tmp/map.yaml > $OUT/place.log 2>&1
      stage placement $B/tandem run default --gpus 1 --steps 3 --placement /tmp/map.yaml --out /tmp/placed.sqlite
      python3 -c "import sqlite3; print(sqlite3.connect('/tmp/placed.sqlite').execute(\"select name, value, description from stats where name like 'placement%'\").fetchall())" >> $OUT/placement.log 2>&1 ;;
    pytorchtrace)
      # Issue 52: a real PyTorch DDP trace of two processes (gloo on one
      # GPU), imported and checked step by step against the independent
      # computation.
      STAGE_TIMEOUT=300 stage ddp_trace python3 tests/gpu/pytorch_ddp_trace.py --out /tmp/ddp
      ls -la /tmp/ddp >> $OUT/ddp_trace.log
      stage ddp_check python3 tests/scripts/check_kineto_import.py --tandem $B/tandem /tmp/ddp
      tar cJf $OUT/ddp_traces.tar.xz -C /tmp ddp ;;
    checkpoint)
      # Issue 51 on one GPU: stopped at step 20 and resumed gives steps
      # 21-40 of a run never stopped (GEMM choices fixed so two processes
      # agree), for GPT-2 124M, llama-124m, ZeRO-3 with one shard and
      # accumulation 2; then --restarts 2 with the run killed twice.
      export TANDEM_GEMM_TUNING=0
      for v in "default:" "resources/jobs/llama-124m.yaml:" "default:--set parallel.shard_parameters=true" \
               "default:--set training.grad_accum=2"; do
        job=${v%%:*}; sets=${v#*:}; tag=$(echo "$job$sets" | tr -c 'a-z0-9' '_' | cut -c1-60); D=/tmp/ckpt_$tag
        rm -rf $D
        # Step lines only ({"step":N,...}): a resumed run also prints lines
        # that name the step it resumed from.
        $B/tandem run $job --gpus 1 --steps 40 --json $sets | grep '^{"step":' | sed 's/,"ms".*//' > $OUT/straight_$tag.jsonl
        # Stopped after step 20 of the 40-step schedule (the learning rate
        # follows the 40 steps', as in the run never stopped).
        $B/tandem run $job --gpus 1 --steps 40 --stop-after 20 --json $sets --checkpoint-dir $D --checkpoint-every 10 \
          > /dev/null
        $B/tandem run $job --gpus 1 --steps 40 --json $sets --checkpoint-dir $D --resume > $OUT/resumed_$tag.log
        grep '^{"step":' $OUT/resumed_$tag.log | sed 's/,"ms".*//' > $OUT/resumed_$tag.jsonl
        if cmp -s <(tail -n 20 $OUT/straight_$tag.jsonl) $OUT/resumed_$tag.jsonl; then
          echo "=== resume $tag: steps 21-40 identical ($(wc -l < $OUT/resumed_$tag.jsonl) resumed steps)"
        else
          echo "=== resume $tag: DIFFER"; diff <(tail -n 20 $OUT/straight_$tag.jsonl) $OUT/resumed_$tag.jsonl | head -6
          grep -v '^{"step":' $OUT/resumed_$tag.log | head -5
        fi
        tail -n 1 $OUT/straight_$tag.jsonl
      done
      rm -rf /tmp/ckpt_restarts
      TANDEM_TEST_KILL_AFTER_STEPS=15,30 stage restarts $B/tandem run default --gpus 1 --steps 40 \
        --checkpoint-dir /tmp/ckpt_restarts --checkpoint-every 5 --restarts 2
      grep -E "restart|step +40/" $OUT/restarts.log
      echo "uninterrupted run's step 40: $(tail -n 1 $OUT/straight_default_.jsonl)"
      unset TANDEM_GEMM_TUNING ;;
    replicacheck)
      # Issue 51, point 5 on one GPU: two data-parallel ranks sharing it
      # (--ranks-per-gpu 2) checked every 5 steps: 20 steps pass (the
      # check's time per call against the step's); then one bit of rank 1's
      # parameters flipped after step 7: the check after step 10 stops the
      # run (non-zero exit) naming the ranks and the tensor, and the profile
      # keeps the record (stat replica_check.mismatch).
      rc_job="default --gpus 1 --ranks-per-gpu 2 --set parallel.data_parallel=2"
      stage replicas_pass $B/tandem run $rc_job --steps 20 --json --check-replicas-every 5
      grep -E '"replica_checks"|"summary"' $OUT/replicas_pass.log
      rm -f /tmp/flip.sqlite
      TANDEM_TEST_FLIP_BIT=1:7 stage replicas_flip $B/tandem run $rc_job --steps 20 --check-replicas-every 5 \
        --profile --out /tmp/flip.sqlite
      grep -E "replicas differ|flipped" $OUT/replicas_flip.log
      python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select name, value, description from stats where name like 'replica%'\").fetchall())" /tmp/flip.sqlite ;;
    replicacheck2)
      # The same over two GPUs, a process per rank (NCCL all-gather of the
      # fingerprints); needs a two-GPU machine.
      rc_job="default --gpus 2 --set parallel.data_parallel=2"
      stage replicas2_pass $B/tandem run $rc_job --steps 200 --json --check-replicas-every 100
      grep -E '"replica_checks"|"summary"' $OUT/replicas2_pass.log
      TANDEM_TEST_FLIP_BIT=1:7 stage replicas2_flip $B/tandem run $rc_job --steps 20 --check-replicas-every 5
      grep -E "replicas differ|flipped" $OUT/replicas2_flip.log ;;
    checkpoint2)
      # The same on two GPUs (a process per rank, each writing its part,
      # rank 0 the manifest), data parallel 2 with ZeRO-1; needs a
      # two-GPU machine.
      export TANDEM_GEMM_TUNING=0; D=/tmp/ckpt_dp2; rm -rf $D
      $B/tandem run default --gpus 2 --steps 40 --json --set parallel.shard_optimizer=true | grep '"step"' \
        | sed 's/,"ms".*//' > $OUT/straight_dp2.jsonl
      $B/tandem run default --gpus 2 --steps 40 --stop-after 20 --json --set parallel.shard_optimizer=true \
        --checkpoint-dir $D --checkpoint-every 10 > /dev/null
      $B/tandem run default --gpus 2 --steps 40 --json --set parallel.shard_optimizer=true --checkpoint-dir $D \
        --resume | grep '"step"' | sed 's/,"ms".*//' > $OUT/resumed_dp2.jsonl
      if cmp -s <(tail -n 20 $OUT/straight_dp2.jsonl) $OUT/resumed_dp2.jsonl; then
        echo "=== resume dp2: steps 21-40 identical"; else echo "=== resume dp2: DIFFER"; fi
      unset TANDEM_GEMM_TUNING ;;
    materialized)
      # PyTorch's kernels of an attention with its scores in HBM and plain
      # GEMMs over their depth, against the roofline's times for them (the
      # published Megatron rows; docs/accuracy.md).
      python3 $DIST/peers/materialized_attention_torch.py --reps 30 > $OUT/materialized_attention.jsonl
      stage materialized_attention $B/bench_materialized_attention $OUT/materialized_attention.jsonl ;;
    fp8gemm)
      # What FP8 GEMMs of Llama 3.1 layers gain over BF16 at the power
      # limit (the simulator's FP8 cost, docs/simulator.md), at the 8192
      # tokens of the published recipes and at 16384.
      stage fp8_gemm $B/bench_fp8_gemm --rounds 3 --yaml $OUT/fp8_gemm_speedup.yaml
      cat $OUT/fp8_gemm_speedup.yaml
      [ "${FP8_16K:-1}" = 1 ] && stage fp8_gemm_16k $B/bench_fp8_gemm --rounds 3 --tokens 16384 ;;
    fp8run)
      # Issue 54: FP8 GEMMs on the GPU executor, delayed scaling (the
      # default; FP8_SCALING=current for the other): the CPU-reference
      # comparisons are in gpu_test_executor (stage executor); here
      # llama-124m through the CLI in FP8 (graph == eager), and a Llama of
      # about 1.1B in FP8 against tandem's own bf16 step, three rounds in
      # turn, with the kernel time per op kind of each.
      sc=${FP8_SCALING:-delayed}
      stage fp8_llama124m $B/tandem run llama-124m --gpus 1 --steps 30 --set training.precision=fp8 \
        --set training.fp8_scaling=$sc
      graph_vs_eager "training.precision=fp8 training.fp8_scaling=$sc" resources/jobs/llama-124m.yaml
      l1b="--set model.layers=22 --set model.hidden=2048 --set model.heads=32 --set model.kv_heads=4
        --set model.mlp_ratio=2.75 --set model.vocab=32000 --set model.seq_len=1024 --set training.micro_batch=16"
      stage fp8_llama1b $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml $l1b \
        --set training.precision=fp8 --set training.fp8_scaling=$sc --versus training.precision=bf16 \
        --steps 30 --rounds ${FP8_ROUNDS:-3} ${FP8_BREAKDOWN:---breakdown}
      # Profiled, for `tandem simulate` against the real step (issue 54 point 4).
      for p in fp8 bf16; do
        stage profile_llama1b_$p $B/tandem run llama-124m $l1b --set training.precision=$p \
          --set training.fp8_scaling=$sc --steps 12 --profile --out $OUT/llama1b_$p.sqlite
      done
      # Llama 2 7B's layers, 12 of its 32 (one H100 holds them unsharded).
      stage fp8_llama2_7b_12l $B/bench_gpt2_h200 --job resources/jobs/llama2-7b.yaml \
        --set parallel.shard_parameters=false --set model.layers=12 --set training.micro_batch=1 \
        --set training.precision=fp8 --set training.fp8_scaling=$sc --versus training.precision=bf16 \
        --steps 8 --rounds 2 --breakdown
      # Real text 2,000 steps do not repeat (this machine's package
      # documentation; the checksum printed), bf16 against FP8, two seeds:
      # the mean loss of the last 200 steps.
      python3 scripts/text_tokens.py --out /tmp/doc.tokens --tree /usr/share/doc --max-tokens 4000000
      for seed in 1 2; do for p in bf16 fp8; do
        stage text_${p}_$seed $B/tandem run llama-124m --steps 2000 --json --set data.source=tokens \
          --set data.path=/tmp/doc.tokens --set model.vocab=256 --set model.seq_len=512 \
          --set training.micro_batch=2 --set training.steps=2000 --set training.seed=$seed \
          --set training.precision=$p --set training.fp8_scaling=$sc
        python3 -c "import json,sys; L=[json.loads(l)['loss'] for l in open(sys.argv[1]) if '\"step\"' in l]; \
print(sys.argv[2], len(L), 'steps, mean loss of the last 200: %.4f' % (sum(L[-200:]) / max(1, len(L[-200:]))))" \
          $OUT/text_${p}_$seed.log "$p seed $seed"
      done; done ;;
    kernelpairs)
      # Two kernels on two streams at once (the simulator's kernel sharing):
      # GPT-2's weight gradients beside the layernorm backward, the fc data
      # gradient and the attention backward, widths 768-2048; a Llama's
      # beside the RMSNorm and SwiGLU backwards and a data gradient, widths
      # 2048-4096 (about two minutes).
      stage kernelpairs $B/bench_kernel_pairs --reps 50
      stage kernelpairs_llama $B/bench_kernel_pairs --family llama --reps 40 ;;
    normbwd)
      # The layernorm's and RMSNorm's backward on the warp- and the
      # block-per-row kernels, alternating, at a 1.1B Llama's rows (2048).
      stage normbwd_2048 $B/bench_layernorm_bwd --width 2048 --rows 16384 --reps 20 ;;
    fp8writers)
      # The FP8 writers (casts, SwiGLU, RMSNorm in both layouts) at each
      # tile shape and walk against their bf16 twins, three rounds (about
      # 45 s).
      stage fp8writers $B/bench_fp8_writers --rounds 3 ;;
    wgstream)
      # Issue 54: the weight-gradient stream on and off (tandem against
      # itself, two rounds in turn), GPT-2 124M, the 1.1B Llama at sequences
      # 1024 and 4096, the 3B at 1024 (about 6 minutes on one H100). tandem
      # simulate with the shipped H100 profile predicts the stream 0.6%
      # faster on the 1.1B and 0.8% slower on GPT-2 124M, which an H200
      # measured 1.5% faster with it (docs/benchmarks.md, tenth session).
      l1b="--set model.layers=22 --set model.hidden=2048 --set model.heads=32 --set model.kv_heads=4
        --set model.mlp_ratio=2.75 --set model.vocab=32000"
      l3b="--set model.layers=28 --set model.hidden=3072 --set model.heads=24 --set model.kv_heads=8
        --set model.mlp_ratio=2.6666667 --set model.vocab=128256 --set model.seq_len=1024 --set training.micro_batch=4"
      off="--versus schedule.weight_gradient_stream=false --rounds 2"
      stage wgstream_gpt2 $B/bench_gpt2_h200 --steps 30 $off
      stage wgstream_1b_1024 $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml $l1b --set model.seq_len=1024 \
        --set training.micro_batch=16 --steps 30 $off
      stage wgstream_1b_4096 $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml $l1b --set model.seq_len=4096 \
        --set training.micro_batch=4 --steps 20 $off
      stage wgstream_3b $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml $l3b --steps 20 $off ;;
    wgprofile)
      # Issue 49: the weight-gradient stream on and off, profiled, at the
      # widths the replay's holder rule was not checked on (GPT-2 350M and
      # 774M, the 1.1B Llama; GPT-2 124M's pair is in docs/accuracy.md,
      # sixty-fourth session); compare with `tandem simulate` of each job
      # and `scripts/kernels_beside.py` (about 3 minutes). The traces come
      # back packed.
      mkdir -p /tmp/wgprofile
      g350="default --set parallel.data_parallel=1 --set model.hidden=1024 --set model.heads=16 --set model.layers=24
        --set training.micro_batch=8"
      g774="default --set parallel.data_parallel=1 --set model.hidden=1280 --set model.heads=20 --set model.layers=36
        --set training.micro_batch=16 --set model.seq_len=512 --set schedule.lm_head_chunks=4"
      l1b="resources/jobs/llama-124m.yaml --set model.layers=22 --set model.hidden=2048 --set model.heads=32
        --set model.kv_heads=4 --set model.mlp_ratio=2.75 --set model.vocab=32000 --set training.micro_batch=16"
      for job in g350 g774 l1b; do for w in true false; do
        stage wgprofile_${job}_$w $B/tandem run ${!job} --steps 12 --profile --out /tmp/wgprofile/$job-$w.real.sqlite \
          --set schedule.weight_gradient_stream=$w
      done; done
      rm -f /tmp/wgprofile/*.rank0.sqlite
      tar cf - -C /tmp/wgprofile . | xz -T16 -6 > $OUT/wgprofile.tar.xz ;;
    fp8walks)
      # The writers' walks: their kernels against the CPU reference (every
      # walk, tile and RMSNorm writer) and the executor's FP8 checks, then
      # the 1.1B Llama's FP8 step (its bf16 step beside each) three ways,
      # alternating twice: a block per tile everywhere
      # (TANDEM_FP8_WRITER=tiles) with the attention's gradient cast apart
      # (training.fp8_attention_grad=false: the sixtieth session's step);
      # each writer's own walk with RMSNorm's one-read writer
      # (TANDEM_RMSNORM_FP8=smem), the gradient cast apart; the same with
      # the attention writing its gradient in FP8 (about 4 minutes).
      stage fp8walks_kernels $B/gpu_test_kernels_llama
      stage fp8walks_executor env GPU_TEST_ONLY=fp8 $B/gpu_test_executor
      l1b="--set model.layers=22 --set model.hidden=2048 --set model.heads=32 --set model.kv_heads=4
        --set model.mlp_ratio=2.75 --set model.vocab=32000 --set model.seq_len=1024 --set training.micro_batch=16"
      fp8="--set training.precision=fp8 --set training.fp8_scaling=delayed"
      for i in 1 2; do
        stage fp8walks_tiles_$i env TANDEM_FP8_WRITER=tiles $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml \
          $l1b $fp8 --set training.fp8_attention_grad=false --versus training.precision=bf16 --steps 30 --rounds 1
        stage fp8walks_own_smem_$i env TANDEM_RMSNORM_FP8=smem $B/bench_gpt2_h200 --job resources/jobs/llama-124m.yaml \
          $l1b $fp8 --set training.fp8_attention_grad=false --versus training.precision=bf16 --steps 30 --rounds 1
        stage fp8walks_own_smem_attn_$i env TANDEM_RMSNORM_FP8=smem $B/bench_gpt2_h200 \
          --job resources/jobs/llama-124m.yaml $l1b $fp8 --set training.fp8_attention_grad=true \
          --versus training.precision=bf16 --steps 30 --rounds 1
      done ;;
    sweepfp8)
      # The grid's FP8 points beside their bf16 twins (about 1 minute on one
      # H100): the in-step FP8 GEMM speed-ups and the writers' slowdowns of
      # this GPU's shipped profile (docs/accuracy.md, "FP8 in the sweep").
      mkdir -p $OUT/$s
      STAGE_TIMEOUT=300 stage $s $B/tandem calibrate --sweep full --part fp8 --out $OUT/$s/$GPU-fp8.yaml \
        --work-dir /tmp/$s --warm-seconds 1.5 --multi-rank-from $GPU_MULTI_RANK --topology $GPU_TOPO ;;
    fp8llama7b)
      # Issue 54 point 2 on the whole Llama 2 7B, unsharded as `tandem run
      # llama2-7b --gpus 1 --set parallel.shard_parameters=false` runs it (one
      # H200: an H100's 80 GB do not hold it): FP8 with delayed scaling
      # against bf16, two rounds in turn, with the kernel time per op kind.
      STAGE_TIMEOUT=500 stage fp8_llama2_7b $B/bench_gpt2_h200 --job resources/jobs/llama2-7b.yaml \
        --set parallel.shard_parameters=false --set training.precision=fp8 --set training.fp8_scaling=delayed \
        --versus training.precision=bf16 --steps 8 --rounds ${FP8_ROUNDS:-2} --breakdown ;;
    ckptcost)
      # Issue 51: what checkpoints cost Llama 2 7B's steps, CKPT_LAYERS of its
      # 32 layers (4: a checkpoint of about 16 GB; an H100 machine's disk
      # wrote 0.3 GB/s): 20 steps without checkpoints and with one every 10
      # steps on the disk, then 6 steps with one every step into memory
      # (/dev/shm: the copy-out and the writer without the disk); each run
      # reports its copy-outs and writes ("checkpoint_cost").
      L=${CKPT_LAYERS:-4}
      for case in 0:20:/tmp 10:20:/tmp 1:6:/dev/shm; do
        every=${case%%:*}; rest=${case#*:}; steps=${rest%%:*}; D=${rest#*:}/ckpt_cost_$every; rm -rf $D
        extra=(); [ $every -gt 0 ] && extra=(--checkpoint-dir $D --checkpoint-every $every --keep 1)
        timeout 300 $B/tandem run llama2-7b --gpus 1 --steps $steps --json --set parallel.shard_parameters=false \
          --set model.layers=$L --set training.micro_batch=1 "${extra[@]}" > $OUT/ckptcost_every$every.jsonl \
          2> $OUT/ckptcost_every$every.err
        echo "=== ckptcost every $every (0: none), $steps steps, in ${D%/*}: rc $?"
        grep -E '"summary"|"checkpoint_cost"' $OUT/ckptcost_every$every.jsonl
        rm -rf $D
      done ;;
    checkpointkill)
      # Issue 51 on one GPU: the run killed (SIGKILL) at random moments while
      # it saves a checkpoint after every step, then resumed; every resume
      # must start from a complete checkpoint and give the losses of a run
      # never stopped. KILL_TRIALS trials (20), the tiny job (its steps take
      # about a millisecond, so most of the run is saving).
      export TANDEM_GEMM_TUNING=0; S=400
      # How long a run that saves every step takes, so the kills land inside it.
      t0=$(date +%s%N)
      $B/tandem run tiny --gpus 1 --steps $S --json --checkpoint-dir /tmp/ckpt_kill_timed --checkpoint-every 1 \
        --keep 2 > /dev/null 2>&1
      run_ms=$(( ($(date +%s%N) - t0) / 1000000 )); rm -rf /tmp/ckpt_kill_timed
      $B/tandem run tiny --gpus 1 --steps $S --json | grep '^{"step":' | sed 's/,"ms".*//' > $OUT/kill_straight.jsonl
      echo "=== checkpointkill: uninterrupted run $(wc -l < $OUT/kill_straight.jsonl) steps; with saves $run_ms ms"
      for t in $(seq 1 ${KILL_TRIALS:-20}); do
        D=/tmp/ckpt_kill_$t; rm -rf $D
        ms=$(python3 -c "import random; random.seed($t); print(random.randint($run_ms // 5, $run_ms * 19 // 20))")
        $B/tandem run tiny --gpus 1 --steps $S --json --checkpoint-dir $D --checkpoint-every 1 --keep 2 \
          > $OUT/kill_$t.log 2>&1 &
        pid=$!; sleep $(python3 -c "print($ms / 1000)"); kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
        partial=0; for d in $D/*/; do [ -d "$d" ] && [ ! -e "$d/manifest.json" ] && partial=$((partial + 1)); done
        $B/tandem run tiny --gpus 1 --steps $S --json --checkpoint-dir $D --resume 2>&1 | grep '^{"step":' \
          | sed 's/,"ms".*//' > $OUT/kill_resumed_$t.jsonl
        python3 - $OUT/kill_straight.jsonl $OUT/kill_resumed_$t.jsonl $S $t $ms $partial <<'PY'
import re, sys
# Lines trimmed before "ms" ({"step":N,"loss":...,"lr":...): not JSON any more.
def steps(path):
    return {int(m.group(1)): l for l in open(path) for m in [re.match(r'\{"step":(\d+),', l)] if m}
straight, resumed = steps(sys.argv[1]), steps(sys.argv[2])
S, t, ms, partial = int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
if not resumed:
    print(f"kill trial {t}: killed after {ms} ms, after the run's last step (nothing to resume)")
    sys.exit()
first = min(resumed)
ok = sorted(resumed) == list(range(first, S + 1)) and all(straight.get(s) == l for s, l in resumed.items())
print(f"kill trial {t}: killed after {ms} ms, {partial} checkpoint(s) without manifest, resumed at step {first}, "
      f"{len(resumed)} steps, {'identical' if ok else 'DIFFER'}")
PY
        rm -rf $D
      done
      unset TANDEM_GEMM_TUNING ;;
    *) echo "=== unknown stage '$s' (see the list at the top of $0)" ;;
  esac
done
