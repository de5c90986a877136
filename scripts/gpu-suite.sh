#!/usr/bin/env bash
# The GPU checks of the project in one command, for a device lease: op
# conformance, fixture parity (safetensors and GGUF), benchmarks of the
# real shapes, the daemon over a CUDA worker, tensor parallelism. Each
# stage writes its log to $OUT/<stage>.txt (or ./gpu-out) and is bounded
# by a timeout, so one hang costs one stage.
#
#   BIN=.gpud bash scripts/gpu-suite.sh conf parity l8b daemon tp ...
#
# BIN holds pocketd and pocket-worker (built here with -tags cuda for the
# worker; gzipped copies are unpacked). Models are generated on the GPU
# host by `pocket-worker synth` (random weights of real shapes).
set -u
export NCCL_NVLS_ENABLE=0 NCCL_CUMEM_ENABLE=0
D=${BIN:-.gpud}
O=${OUT:-./gpu-out}
mkdir -p "$O"
# bins.tar.xz: both binaries in one solid archive (smaller than two .xz files,
# which matters under the device's 64 MiB transfer limit)
for f in "$D"/*.tar.xz; do [ -e "$f" ] && tar -xJf "$f" -C "$D" && rm -f "$f"; done
for f in "$D"/*.gz; do [ -e "$f" ] && gunzip -f "$f"; done
for f in "$D"/*.xz; do [ -e "$f" ] && unxz -f "$f"; done
chmod +x "$D"/* 2>/dev/null
W="$D/pocket-worker"
step() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "== $name: $*" | tee -a "$O/$stage.txt"
  local t0=$(date +%s)
  timeout "$secs" "$@" >>"$O/$stage.txt" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$O/$stage.txt"
}
ab() { # list name secs command...: the command again under each entry of an A/B list
  # (entries: VAR=value, several joined by +, e.g. POCKET_ATTN_CHUNK=64+POCKET_PDL=0;
  # values may hold commas), logged as name-entry
  local list=$1 name=$2 secs=$3 kv; shift 3
  for kv in $list; do step "$name-$kv" "$secs" env ${kv//+/ } "$@"; done
}
model() { # shape dir [synth flags]
  [ -e "$2/.done" ] || { $W synth --shape "$1" --out "$2" "${@:3}" >/dev/null 2>&1 && touch "$2/.done"; }
}
gguf_fixtures() {
  for d in models/gguf/testdata/*/; do
    n=$(basename "$d")
    [ -f "$d/model.gguf.gz" ] || continue
    mkdir -p /tmp/gg/$n && gunzip -c "$d/model.gguf.gz" >/tmp/gg/$n/model.gguf && cp "$d"/reference.safetensors /tmp/gg/$n/ 2>/dev/null
  done
}
abruns() { # "name=dir[+VAR=value...] ...": AB_MODEL's bench under each entry, one of each a round, AB_ROUNDS rounds
  local e n r dir set i f
  for e in $1; do # unpack each build once
    r=${e#*=}; dir=${r%%+*}
    for f in "$dir"/*.xz; do [ -e "$f" ] && unxz -f "$f"; done
    chmod +x "$dir/pocket-worker"
  done
  bench_model ${AB_MODEL:-q4km}
  for i in $(seq 1 "${AB_ROUNDS:-3}"); do
    for e in $1; do
      n=${e%%=*} r=${e#*=}; dir=${r%%+*} set=
      [ "$dir" != "$r" ] && set=${r#*+}
      step "$n-$i" 200 env ${set//+/ } "$dir/pocket-worker" bench $M --json
    done
  done
  python3 scripts/bench-summary.py "$O/$stage.txt" >"$O/$stage-summary.txt"
}
bench_model() { # sets M: bench flags of model $1 (q4km|q8|q35|l8b), generated if missing
  case $1 in
  q4km) [ -e /tmp/q4/.done ] || { $W synth --shape qwen3-8b --format q4_k_m --out /tmp/q4 >/dev/null 2>&1 && touch /tmp/q4/.done; }
    M="--model /tmp/q4/model.gguf --prompt-tokens 128 --new-tokens 64" ;;
  q8) [ -e /tmp/q8/.done ] || { $W synth --shape qwen3-8b --format q8_0 --out /tmp/q8 >/dev/null 2>&1 && touch /tmp/q8/.done; }
    M="--model /tmp/q8/model.gguf --prompt-tokens 128 --new-tokens 64" ;;
  q35) model qwen3.5-27b-fp8 /tmp/m-qwen3.5-27b-fp8; M="--model /tmp/m-qwen3.5-27b-fp8 --prompt-tokens 512 --new-tokens 64" ;;
  l8b) model llama3-8b /tmp/l8b; M="--model /tmp/l8b --prompt-tokens 512 --new-tokens 128" ;;
  mm2|ds3|glm) P=${1/mm2/minimax-m2-slice}; P=${P/ds3/deepseek-v3-slice}; P=${P/glm/glm-4.5-air-slice}; model $P /tmp/m-$P
    M="--model /tmp/m-$P --prompt-tokens ${AB_PROMPT:-2048} --new-tokens 64" ;;
  esac
}
for stage in "$@"; do
  case $stage in
  conf) step conformance 300 $W conformance ;;
  membw) # streaming-read rates by SM count and copy method (kernels/cuda/membw.cu); MEMBW_ARGS more flags
    step membw 300 $W membw ${MEMBW_ARGS:-} ;;
  qbench) # one-row GEMVs alone (pocket-worker qbench; QB_ARGS e.g. "--formats F8_E4M3,BF16"), then, where
    # QB_NCU names a shape (e.g. 5120x17408) of QB_NCU_FORMAT (F8_E4M3), ncu's detail of its kernel with the
    # warp stall reasons (the 9th launch of a kernel matching QB_NCU_KERNEL: past the warm-up); QB_ENVS settings (VAR=value, several joined by +) each rerun qbench
    step qbench 200 $W qbench ${QB_ARGS:-}
    ab "${QB_ENVS:-}" qbench 200 $W qbench ${QB_ARGS:-}
    if [ -n "${QB_NCU:-}" ]; then
      ST=""
      for r in long_scoreboard lg_throttle mio_throttle wait math_pipe_throttle not_selected short_scoreboard barrier; do
        ST="$ST,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
      done
      step ncu-qbench 200 ncu --kernel-name regex:"${QB_NCU_KERNEL:-f8pipe|gemv|f8mma|qmv}" --launch-skip 8 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
        --section Occupancy --section LaunchStats --metrics "${ST#,}" $W qbench --formats "${QB_NCU_FORMAT:-F8_E4M3}" \
        --shapes "$QB_NCU"
    fi ;;
  parity)
    step parity-safetensors 300 $W parity -skip-unsupported models/testdata/models/*/
    gguf_fixtures
    step parity-gguf 300 $W parity -skip-unsupported /tmp/gg/*/ ;;
  l8b) # issue #5's decode bar: ≥ 240 tok/s; A/B of the fused kernels and PDL
    model llama3-8b /tmp/l8b
    step bench 120 $W bench --model /tmp/l8b --prompt-tokens 512 --new-tokens 128 --json
    step bench-8k 120 $W bench --model /tmp/l8b --prompt-tokens 8000 --new-tokens 128 --json
    # L8B_AB, e.g. "POCKET_ATTN_CHUNK=64+POCKET_ATTN_BLOCKS=4 POCKET_PDL=0"
    ab "${L8B_AB:-}" bench 120 $W bench --model /tmp/l8b --prompt-tokens 512 --new-tokens 128 --json
    ab "${L8B_8K_AB:-}" bench-8k 120 $W bench --model /tmp/l8b --prompt-tokens 8000 --new-tokens 128 --json
    [ -n "${QUICK:-}" ] && continue # QUICK=1: the two headline numbers, no A/B
    POCKET_PDL=0 step bench-nopdl 120 $W bench --model /tmp/l8b --prompt-tokens 512 --new-tokens 128 --json
    POCKET_FUSED=0 step bench-unfused 120 $W bench --model /tmp/l8b --prompt-tokens 512 --new-tokens 128 --json
    for f in ${FUSED_AB:-}; do
      POCKET_FUSED=$f step bench-fused-$f 120 $W bench --model /tmp/l8b --prompt-tokens 512 --new-tokens 128 --json
    done
    POCKET_ATTN=partial step bench-attn-partial 120 $W bench --model /tmp/l8b --prompt-tokens 512 --new-tokens 128 --json
    POCKET_ATTN=partial step bench-8k-attn-partial 120 $W bench --model /tmp/l8b --prompt-tokens 8000 --new-tokens 128 --json ;;
  q35) # issue #6: Qwen3.5-27B FP8 decode (bar: 85% of the weight-bytes roofline); ncu detail of a GEMV
    model qwen3.5-27b-fp8 /tmp/m-qwen3.5-27b-fp8
    step bench-q35 200 $W bench --model /tmp/m-qwen3.5-27b-fp8 --prompt-tokens 512 --new-tokens 64 --json
    # Q35_AB, e.g. "POCKET_FP8_MMA=0 POCKET_FP8_PREFILL=tf32"
    ab "${Q35_AB:-}" bench-q35 200 $W bench --model /tmp/m-qwen3.5-27b-fp8 --prompt-tokens 512 --new-tokens 64 --json
    # Q35_PREFILL: prompt lengths whose prefill is measured under each Q35_AB entry too
    for n in ${Q35_PREFILL:-}; do
      step prefill-q35-$n 200 $W bench --model /tmp/m-qwen3.5-27b-fp8 --prompt-tokens $n --new-tokens 2 --json
      ab "${Q35_AB:-}" prefill-q35-$n 200 $W bench --model /tmp/m-qwen3.5-27b-fp8 --prompt-tokens $n --new-tokens 2 --json
    done
    for k in ${NCU_KERNELS:-gemv_add8}; do
      [ "$k" = none ] && continue
      step ncu-$k 120 ncu --kernel-name $k --launch-skip 4 --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section InstructionStats --section Occupancy \
        $W bench --model /tmp/m-qwen3.5-27b-fp8 --prompt-tokens 16 --new-tokens 4
    done ;;
  gemvab) # grouped-GEMV grid sizing A/B (POCKET_GEMV_BLOCKS) on the bf16 and the FP8 model
    model llama3-8b /tmp/l8b
    model qwen3.5-27b-fp8 /tmp/m-qwen3.5-27b-fp8
    for n in ${GEMV_BLOCKS:-2 3 4 6}; do
      POCKET_GEMV_BLOCKS=$n step l8b-blocks-$n 120 $W bench --model /tmp/l8b --prompt-tokens 512 --new-tokens 128 --json
      POCKET_GEMV_BLOCKS=$n step q35-blocks-$n 200 $W bench --model /tmp/m-qwen3.5-27b-fp8 --prompt-tokens 512 --new-tokens 64 --json
    done ;;
  profile) # per-kernel device time of eager decode steps (ncu serialises kernels: no overlap)
    # PROF_CONFIG: a config.json instead of the shape, e.g. scripts/llama3-8b-tp2-rank.json
    # (one rank's share of Llama-3-8B at TP2: its GEMV shapes in a TP1 run).
    P=${PROF_SHAPE:-llama3-8b}
    model $P /tmp/m-$P ${PROF_CONFIG:+--config $PROF_CONFIG}
    step ncu-$P 300 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-skip ${NCU_SKIP:-1500} --launch-count ${NCU_COUNT:-600} \
      -o /tmp/prof -f $W bench --model /tmp/m-$P --prompt-tokens 16 --new-tokens 8
    ncu --import /tmp/prof.ncu-rep --csv --metrics gpu__time_duration.sum >/tmp/prof.csv 2>/dev/null
    python3 scripts/ncu-summary.py /tmp/prof.csv >>"$O/$stage.txt" 2>&1 ;;
  pprofile) # per-kernel device time of a prefill (the first of bench's two: the warm-up); PPROF_SHAPE (qwen3-8b),
    # PPROF_TOKENS (4096)
    P=${PPROF_SHAPE:-qwen3-8b}
    model $P /tmp/m-$P
    step ncu-prefill 400 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-count ${NCU_COUNT:-1000} \
      -o /tmp/pprof -f $W bench --model /tmp/m-$P --prompt-tokens ${PPROF_TOKENS:-4096} --new-tokens 2
    ncu --import /tmp/pprof.ncu-rep --csv --metrics gpu__time_duration.sum >/tmp/pprof.csv 2>/dev/null
    python3 scripts/ncu-summary.py /tmp/pprof.csv >>"$O/$stage.txt" 2>&1 ;;
  prefill) # prefill tok/s of the FP8 and hybrid shapes at PREFILL_TOKENS (512 2048 8192), then under each
    # PREFILL_AB entry, e.g. "POCKET_FP8_PREFILL=bf16 POCKET_ATTN_PREFILL_256=0" (docs/prefill.md)
    for P in ${PREFILL_SHAPES:-qwen3.5-27b-fp8 minimax-m2-slice deepseek-v3-slice}; do
      model $P /tmp/m-$P
      for n in ${PREFILL_TOKENS:-512 2048 8192}; do
        step prefill-$P-$n 200 $W bench --model /tmp/m-$P --prompt-tokens $n --new-tokens 2 --json
        ab "${PREFILL_AB:-}" prefill-$P-$n 200 $W bench --model /tmp/m-$P --prompt-tokens $n --new-tokens 2 --json
      done
    done ;;
  ncu) # detail of one kernel: NCU_KERNEL (default the prefill attention) in NCU_MODEL's prefill of NCU_PROMPT tokens
    K=${NCU_KERNEL:-attn_prefill_128_3}
    model ${NCU_SHAPE:-qwen3-8b} /tmp/m-${NCU_SHAPE:-qwen3-8b}
    step ncu-$K 300 ncu --kernel-name $K --launch-skip ${NCU_SKIP:-20} --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats \
      $W bench --model /tmp/m-${NCU_SHAPE:-qwen3-8b} --prompt-tokens ${NCU_PROMPT:-4096} --new-tokens 2 ;;
  slices) # issue #6: MoE slices and the hybrid FP8 model at real widths
    for p in ${SLICES:-minimax-m2-slice deepseek-v3-slice qwen3.5-27b-fp8}; do
      rm -rf /tmp/slice
      step synth-$p 300 $W synth --shape $p --out /tmp/slice
      step bench-$p 300 $W bench --model /tmp/slice --prompt-tokens ${SLICE_PROMPT:-512} --new-tokens 64 --json
    done
    rm -rf /tmp/slice ;;
  q8b) # prefill bar: ≥ 30k tok/s at 4096
    model qwen3-8b /tmp/m-qwen3-8b
    step bench-4096 120 $W bench --model /tmp/m-qwen3-8b --prompt-tokens 4096 --new-tokens 16 --json
    # Q8B_AB, e.g. "POCKET_ATTN_OCC=2 POCKET_CUBLASLT=0"
    ab "${Q8B_AB:-}" bench-4096 120 $W bench --model /tmp/m-qwen3-8b --prompt-tokens 4096 --new-tokens 16 --json
    step bench-512 120 $W bench --model /tmp/m-qwen3-8b --prompt-tokens 512 --new-tokens 128 --json ;;
  q4km)
    [ -e /tmp/q4/.done ] || { $W synth --shape qwen3-8b --format q4_k_m --out /tmp/q4 >/dev/null 2>&1 && touch /tmp/q4/.done; }
    step bench-q4km 180 $W bench --model /tmp/q4/model.gguf --prompt-tokens 128 --new-tokens 64 --json
    POCKET_QGEMV=v1 step bench-q4km-v1 180 $W bench --model /tmp/q4/model.gguf --prompt-tokens 128 --new-tokens 64 --json
    # Q4_AB, e.g. "POCKET_QMV_PF=0 POCKET_QMV_FOLD=1"
    ab "${Q4_AB:-}" bench-q4km 180 $W bench --model /tmp/q4/model.gguf --prompt-tokens 128 --new-tokens 64 --json
    step qbench 180 $W qbench ;;
  q4prof) # issue #10: per-kernel (and per-shape) device time of the Q4_K_M decode step, ncu detail of its GEMVs
    [ -e /tmp/q4/.done ] || { $W synth --shape qwen3-8b --format q4_k_m --out /tmp/q4 >/dev/null 2>&1 && touch /tmp/q4/.done; }
    step ncu-q4km 300 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-skip ${NCU_SKIP:-1500} --launch-count ${NCU_COUNT:-700} \
      -o /tmp/q4prof -f $W bench --model /tmp/q4/model.gguf --prompt-tokens 16 --new-tokens 8
    ncu --import /tmp/q4prof.ncu-rep --csv --metrics gpu__time_duration.sum >/tmp/q4prof.csv 2>/dev/null
    python3 scripts/ncu-summary.py --by-grid /tmp/q4prof.csv >>"$O/$stage.txt" 2>&1
    for k in ${Q4_NCU:-qmv_swiglu_4_3 qmv_4_3}; do
      [ "$k" = none ] && continue
      step ncu-$k 200 ncu --kernel-name regex:"^$k\$" --launch-skip ${Q4_NCU_SKIP:-120} --launch-count ${Q4_NCU_COUNT:-3} \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
        --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats --section InstructionStats \
        $W bench --model /tmp/q4/model.gguf --prompt-tokens 16 --new-tokens 8
    done ;;
  stalls) # ncu detail with the warp stall reasons of kernel NCU_K (a regex) on AB_MODEL's decode:
    # launches NCU_SKIP.. (NCU_COUNT of them) of that kernel; the whole report into the log
    bench_model ${AB_MODEL:-q4km}
    ST=""
    for r in long_scoreboard lg_throttle mio_throttle wait math_pipe_throttle not_selected short_scoreboard barrier \
      drain no_instruction membar selected dispatch_stall imc_miss branch_resolving sleeping; do
      ST="$ST,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
    done
    ST="${ST#,},l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
    ST="$ST,smsp__inst_executed.sum,dram__bytes_read.sum"
    step "ncu-${NCU_K:?NCU_K names the kernel}" 300 ncu --kernel-name regex:"$NCU_K" --launch-skip ${NCU_SKIP:-120} \
      --launch-count ${NCU_COUNT:-1} --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section Occupancy --metrics "$ST" $W bench $M --prompt-tokens 16 --new-tokens 8 ;; # the later flags win
  abbin) # interleaved A/B of two builds: $BIN against $BIN_OLD (its worker, unpacked as BIN's)
    # on AB_MODEL q4km|q35|l8b, AB_ROUNDS rounds (default 3): run-to-run drift (±1.5%) hits
    # both alike, which separate calls do not. E.g. BIN_OLD=.gpud/old AB_MODEL=q35.
    abruns "old=${BIN_OLD:?BIN_OLD names the other build} new=$D" ;;
  abn) # interleaved runs of several builds and settings, one of each a round: AB_RUNS entries
    # name=dir[+VAR=value...] (dir holds a pocket-worker, e.g. .gpud/w/old; settings joined by +),
    # on AB_MODEL q4km|q8|q35|l8b|mm2|ds3|glm, AB_ROUNDS rounds (default 3). E.g.
    # AB_RUNS="old=.gpud/w/old new=.gpud/w/new new-geom=.gpud/w/new+POCKET_FP8_PIPE_GEOM=norm:5120=3x8x4"
    abruns "${AB_RUNS:?AB_RUNS lists name=dir entries}" ;;
  abenv) # interleaved A/B of settings on one build: AB_MODEL q4km|q8|q35|l8b|mm2|ds3|glm (the slices at AB_PROMPT, 2048), AB_ENVS entries (VAR=value,
    # several joined by +) each run against no setting in every one of AB_ROUNDS rounds (default 3)
    bench_model ${AB_MODEL:-q4km}
    for i in $(seq 1 "${AB_ROUNDS:-3}"); do
      step base-$i 200 $W bench $M --json
      for e in ${AB_ENVS:?AB_ENVS lists the settings}; do step "$e-$i" 200 env ${e//+/ } $W bench $M --json; done
    done
    python3 scripts/bench-summary.py "$O/$stage.txt" >"$O/$stage-summary.txt" ;;
  rank) # greedy decode through a rank process as pocketd drives it (pocket-worker rank-bench:
    # the protocol, replays, lookahead and fed steps): AB_MODEL q4km|q8|l8b|q35 (hybrids: no lookahead),
    # AB_ENVS settings each against none (e.g. "POCKET_FEED=0 POCKET_LOOKAHEAD=0"), AB_ROUNDS rounds;
    # RANK_ARGS more flags (e.g. "--temperature 0.7": sampled steps)
    bench_model ${AB_MODEL:-q4km}
    for i in $(seq 1 "${AB_ROUNDS:-3}"); do
      step base-$i 300 $W rank-bench $M --rounds 3 ${RANK_ARGS:-}
      for e in ${AB_ENVS:-}; do step "$e-$i" 300 env ${e//+/ } $W rank-bench $M --rounds 3 ${RANK_ARGS:-}; done
    done
    python3 scripts/bench-summary.py "$O/$stage.txt" >"$O/$stage-summary.txt" ;;
  ablate) # what the decode step costs without some launches (POCKET_ABLATE, kernels/cuda/switches.go;
    # wrong results, timing only): AB_MODEL q4km|q35|l8b; ABLATE: tag sets, e.g. "qx,qx_norm attn"
    # ABL_ENV: settings for every run of the stage (VAR=value, several joined by +)
    bench_model ${AB_MODEL:-q4km}
    E=${ABL_ENV:+${ABL_ENV//+/ }}
    step base 200 env $E $W bench $M --json
    for a in ${ABLATE:-qx qx_norm attn qmv_o qmv_down}; do step "ablate-$a" 200 env $E POCKET_ABLATE=$a $W bench $M --json; done
    step base-again 200 env $E $W bench $M --json
    python3 scripts/bench-summary.py "$O/$stage.txt" >"$O/$stage-summary.txt" ;;
  probe) # in-graph timeline of AB_MODEL's decode step (kernels/cuda/probe.cuh): the worker of
    # scripts/probe-build.sh in $PROBE_BIN (default $BIN/probe) against this build's;
    # PROBE_ARGS for probe-summary.py (e.g. "--blocks attn_decode_8")
    bench_model ${AB_MODEL:-q4km}
    P=${PROBE_BIN:-$D/probe}
    for f in "$P"/*.xz; do [ -e "$f" ] && unxz -f "$f"; done
    chmod +x "$P/pocket-worker"
    step base 200 $W bench $M --json
    step probe 200 "$P/pocket-worker" bench $M --json --probe-out "/tmp/probe-${AB_MODEL:-q4km}"
    python3 scripts/probe-summary.py "/tmp/probe-${AB_MODEL:-q4km}" --timeline ${PROBE_ARGS:-} >>"$O/$stage.txt" 2>&1 ;;
  conf-ab) # conformance and the FP8/hybrid fixtures' parity under each CONF_AB entry (default-off paths)
    ab "${CONF_AB:-}" conformance 300 $W conformance
    ab "${CONF_AB:-}" parity-fp8-hybrid 200 $W parity -skip-unsupported models/testdata/models/qwen3-fp8/ \
      models/testdata/models/deepseek_v3-fp8/ models/testdata/models/deepseek_v32/ models/testdata/models/qwen3_5/ \
      models/testdata/models/qwen3_next/ ;;
  conf-v1) POCKET_QGEMV=v1 step conformance-qgemv-v1 300 $W conformance ;;
  conf-fold) POCKET_QMV_FOLD=1 step conformance-qmv-fold 300 $W conformance ;;
  daemon) # session costs and decode through pocketd
    model llama3-8b /tmp/l8b
    rm -rf /tmp/st-d
    $D/pocketd serve --model /tmp/l8b --backend cuda --devices 0 --socket /tmp/pd.sock --listen off --state-dir /tmp/st-d \
      >"$O/daemon-log.txt" 2>&1 &
    pid=$!
    for i in $(seq 1 120); do curl -s --unix-socket /tmp/pd.sock http://pocketd/v0/health 2>/dev/null | grep -q '"ok"' && break; sleep 1; done
    step session 300 python3 scripts/gpu-daemon-session.py --socket /tmp/pd.sock --model l8b --vocab 128256 --context 7680
    kill $pid; wait $pid 2>/dev/null ;;
  decode) BIN=$D step daemon-decode 400 bash scripts/gpu-daemon-decode.sh "${DECODE:-tp1}" ;;
  hybrid|daemon-tp2) # a hybrid model through a CUDA worker; or the 8B model on a TP2 group (P2P all-reduce)
    if [ $stage = hybrid ]; then m=models/testdata/models/qwen3_5 name=qwen3_5 vocab=512 ctx=1024 flags="--devices 0"
    else model llama3-8b /tmp/l8b; m=/tmp/l8b name=l8b vocab=128256 ctx=7680 flags="--devices 0,1 --tp 2"; fi
    rm -rf /tmp/st-$stage
    $D/pocketd serve --model $m --backend cuda $flags --socket /tmp/p-$stage.sock --listen off --state-dir /tmp/st-$stage \
      >"$O/$stage-log.txt" 2>&1 &
    pid=$!
    for i in $(seq 1 120); do curl -s --unix-socket /tmp/p-$stage.sock http://pocketd/v0/health 2>/dev/null | grep -q '"ok"' && break; sleep 1; done
    step session-$stage 300 python3 scripts/gpu-daemon-session.py --socket /tmp/p-$stage.sock --model $name --vocab $vocab --context $ctx
    kill $pid; wait $pid 2>/dev/null ;;
  tp) # issue #7: TP2 vs TP1 agreement and speed-up
    model llama3-8b /tmp/l8b
    step tp2 300 $W tp --model /tmp/l8b --tp 2 --devices 0,1 --prompt-tokens 128 --steps 256 --timeout 45s
    POCKET_P2P=0 step tp2-nccl 300 $W tp --model /tmp/l8b --tp 2 --devices 0,1 --prompt-tokens 128 --steps 256 --timeout 45s
    # TP_AB, e.g. "POCKET_GEMV_L2=200 POCKET_PDL=0"
    ab "${TP_AB:-}" tp2 300 $W tp --model /tmp/l8b --tp 2 --devices 0,1 --prompt-tokens 128 --steps 256 --timeout 45s ;;
  tp-stop) # issue #7: a rank stopped (SIGSTOP, not dead) during TP2 decode: rank 0's all-reduce must give
    # up at the spin timeout (--timeout) with its error, and the launcher must end (no hang)
    model llama3-8b /tmp/l8b
    $W tp --model /tmp/l8b --tp 2 --devices 0,1 --prompt-tokens 128 --steps 3000 --timeout 25s \
      >"$O/tp-stop.json" 2>"$O/tp-stop.err" &
    lp=$!
    for i in $(seq 1 240); do grep -q "TP2 on GPUs" "$O/tp-stop.err" && break; sleep 0.5; done
    sleep 10
    r1=$(pgrep -f -- "--rank 1" | head -1)
    echo "stopping rank 1 (pid $r1) at $(date +%T.%N)" | tee -a "$O/$stage.txt"
    kill -STOP "$r1"
    for i in $(seq 1 120); do kill -0 $lp 2>/dev/null || break; sleep 0.5; done
    echo "launcher ended at $(date +%T.%N): $(kill -0 $lp 2>/dev/null && echo 'still running (FAIL)' || echo ok)" | tee -a "$O/$stage.txt"
    kill -CONT "$r1" 2>/dev/null; kill -9 "$r1" $lp 2>/dev/null; wait $lp 2>/dev/null
    grep -v "^tp: TP" "$O/tp-stop.err" | tail -4 | tee -a "$O/$stage.txt" ;;
  tp-hybrid) # issues #7/#8: the hybrids on a TP2 group (fixtures, the Qwen3.5-27B FP8 shape, the daemon)
    for f in qwen3_5 qwen3_next; do
      step tp2-$f 200 $W tp --model models/testdata/models/$f --tp 2 --devices 0,1 --prompt-tokens 16 --steps 32 --timeout 45s
    done
    model qwen3.5-27b-fp8 /tmp/m-qwen3.5-27b-fp8
    POCKET_FP8_PREFILL=tf32 step tp2-q35 400 $W tp --model /tmp/m-qwen3.5-27b-fp8 --tp 2 --devices 0,1 --prompt-tokens 128 --steps ${TP_STEPS:-128} --timeout 90s
    rm -rf /tmp/st-tph
    $D/pocketd serve --model models/testdata/models/qwen3_5 --backend cuda --devices 0,1 --tp 2 --socket /tmp/p-tph.sock \
      --listen off --state-dir /tmp/st-tph >"$O/tp-hybrid-log.txt" 2>&1 &
    pid=$!
    for i in $(seq 1 120); do curl -s --unix-socket /tmp/p-tph.sock http://pocketd/v0/health 2>/dev/null | grep -q '"ok"' && break; sleep 1; done
    step session-tp-hybrid 300 python3 scripts/gpu-daemon-session.py --socket /tmp/p-tph.sock --model qwen3_5 --vocab 512 --context 1024
    kill $pid; wait $pid 2>/dev/null ;;
  tp4) # issue #8 on four GPUs: TP4 against TP1 (8B bf16: agreement, speed-up, all-reduce
    # share), the Qwen3.5-27B FP8 shape as a TP4 group, then served by pocketd --tp 4
    model llama3-8b /tmp/l8b
    step tp4 300 $W tp --model /tmp/l8b --tp 4 --devices 0,1,2,3 --prompt-tokens 128 --steps 256 --timeout 45s
    [ -n "${TP4_NCCL:-}" ] && POCKET_P2P=0 step tp4-nccl 300 $W tp --model /tmp/l8b --tp 4 --devices 0,1,2,3 --prompt-tokens 128 --steps 256 --timeout 45s
    model qwen3.5-27b-fp8 /tmp/q35
    # Agreement with the prefill GEMMs at tf32: the default E4M3-rounded activations differ
    # between any two runs by more than TP does on this random 64-layer model
    # (docs/benchmarks.md, 2026-11-30 from 22:09); speed on the defaults.
    POCKET_FP8_PREFILL=tf32 step tp4-q35-tf32 400 $W tp --model /tmp/q35 --tp 4 --devices 0,1,2,3 --prompt-tokens 128 --steps ${TP_STEPS:-128} --timeout 90s
    step tp4-q35 400 $W tp --model /tmp/q35 --tp 4 --devices 0,1,2,3 --prompt-tokens 128 --steps ${TP_STEPS:-128} --timeout 90s
    rm -rf /tmp/st-tp4
    $D/pocketd serve --model /tmp/q35 --backend cuda --devices 0,1,2,3 --tp 4 --socket /tmp/p-tp4.sock \
      --listen off --state-dir /tmp/st-tp4 >"$O/tp4-log.txt" 2>&1 &
    pid=$!
    for i in $(seq 1 240); do curl -s --unix-socket /tmp/p-tp4.sock http://pocketd/v0/health 2>/dev/null | grep -q '"ok"' && break
      kill -0 $pid 2>/dev/null || break; sleep 1; done
    curl -s --unix-socket /tmp/p-tp4.sock http://pocketd/v0/health >>"$O/$stage.txt"; echo >>"$O/$stage.txt"
    step session-tp4-q35 300 python3 scripts/gpu-daemon-session.py --socket /tmp/p-tp4.sock --model q35 --vocab 248320 --context ${TP4_CTX:-4096}
    kill $pid; wait $pid 2>/dev/null ;;
  q35d) # a hybrid through the daemon: a 4096-token session's cold TTFT against bench's prefill (and
    # bench's at the 256-token pieces the daemon prefills between snapshots), with snapshots held by
    # the worker on the GPU (default) and kept by the daemon; Q35D_TP=2 serves it as a TP2 group
    model qwen3.5-27b-fp8 /tmp/q35
    # Q35D_BENCH=0 skips the bench rows (Q35D_BENCH_N their prompt lengths, Q35D_BENCH_ARGS more
    # flags, e.g. --marks-every 256); Q35D_CONFIGS lists host_snapshots:prefill_step_ms runs.
    [ "${Q35D_BENCH:-1}" = 1 ] && for n in ${Q35D_BENCH_N:-256 1024 4096}; do
      step bench-q35-$n 200 $W bench --model /tmp/q35 --prompt-tokens $n --new-tokens 8 --json ${Q35D_BENCH_ARGS:-}; done
    tpn=${Q35D_TP:-1}; devs=$(seq -s, 0 $((tpn - 1)))
    for cf in ${Q35D_CONFIGS:-false:0 true:0}; do
      hs=${cf%%:*}; ps=${cf##*:}
      printf 'version = 1\n[cache]\nhost_snapshots = %s\n[limits]\nprefill_step_ms = %s\n' $hs $ps >/tmp/q35d.toml
      rm -rf /tmp/st-q35d
      $D/pocketd serve --config /tmp/q35d.toml --model /tmp/q35 --backend cuda --devices $devs --tp $tpn --socket /tmp/p-q35d.sock \
        --listen off --state-dir /tmp/st-q35d >"$O/q35d-host-$hs-step-$ps-log.txt" 2>&1 &
      pid=$!
      for i in $(seq 1 120); do curl -s --unix-socket /tmp/p-q35d.sock http://pocketd/v0/health 2>/dev/null | grep -q '"ok"' && break
        kill -0 $pid 2>/dev/null || break; sleep 1; done
      step session-q35d-host-$hs-step-$ps 300 python3 scripts/gpu-daemon-session.py --socket /tmp/p-q35d.sock --model q35 --vocab 248320 --context 4096
      kill $pid; wait $pid 2>/dev/null
    done ;;
  *) echo "unknown stage $stage" | tee -a "$O/errors.txt" ;;
  esac
done
