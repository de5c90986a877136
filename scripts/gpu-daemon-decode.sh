#!/usr/bin/env bash
# Decode through the daemon, eager steps (POCKET_GRAPHS=0) vs recorded CUDA
# graphs with the argmax on the device (the default), TP1 and, on a host
# with two GPUs, TP2: tok/s of one greedy request and whether the tokens
# agree. Run on the GPU host with BIN= the folder holding pocketd and
# pocket-worker (default: this script's folder). "lookahead" compares the
# graph steps with the rank's lookahead off (POCKET_LOOKAHEAD=0) and on
# (the default; daemon/worker/rank_ahead.go), TP1 and TP2.
#   BIN=.gpud bash scripts/gpu-daemon-decode.sh [tp1|tp2|all|lookahead]
set -u
export NCCL_NVLS_ENABLE=0 NCCL_CUMEM_ENABLE=0
D=${BIN:-$(cd "$(dirname "$0")" && pwd)}
which=${1:-all}
[ -d /tmp/l8b ] || $D/pocket-worker synth --shape llama3-8b --out /tmp/l8b >/dev/null 2>&1 || { echo synth failed; exit 1; }
prompt=$(python3 -c "import random; random.seed(5); print(','.join(str(random.randrange(128256)) for _ in range(512)))")
sock=/tmp/pd-decode.sock
api() { curl -s --max-time 300 --unix-socket $sock "http://pocketd$1" ${2:+-d "$2"}; }
ids() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('ids', d))"; }
run() { # $1 label, $2 POCKET_GRAPHS value, rest: serve flags ($LOOKAHEAD: POCKET_LOOKAHEAD's value)
  label=$1 graphs=$2; shift 2
  rm -rf /tmp/st-$label
  POCKET_LOOKAHEAD=${LOOKAHEAD:-1} POCKET_GRAPHS=$graphs $D/pocketd serve --model /tmp/l8b --socket $sock --listen off --state-dir /tmp/st-$label "$@" \
    > /tmp/log-$label 2>&1 &
  pid=$!
  for i in $(seq 1 180); do api /v0/health 2>/dev/null | grep -q '"ok"' && break; sleep 1; done
  id=$(api /v0/sessions '{"model":"l8b"}' | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
  api /v0/sessions/$id/append "{\"tokens\":[$prompt]}" > /dev/null
  # Warm-up: the first steps record the graphs of the context's bucket.
  api /v0/sessions/$id/generate '{"max_tokens":8,"temperature":0}' > /dev/null
  t0=$(date +%s.%N)
  g=$(api /v0/sessions/$id/generate '{"max_tokens":128,"temperature":0}')
  t1=$(date +%s.%N)
  echo "$label greedy 128: $(python3 -c "print(f'{128/($t1-$t0):.1f} tok/s ({$t1-$t0:.3f} s incl. HTTP)')")"
  echo "$g" | ids > /tmp/ids-$label
  # Steps that need the logits (Forward of the last logits, not argmax-only).
  t0=$(date +%s.%N)
  l=$(api /v0/sessions/$id/generate '{"max_tokens":32,"temperature":0,"logprobs":true}')
  t1=$(date +%s.%N)
  echo "$label logprobs 32: $(python3 -c "print(f'{32/($t1-$t0):.1f} tok/s')")"
  echo "$l" | ids > /tmp/ids-lp-$label
  kill $pid; wait $pid 2>/dev/null
  grep -h "decode graphs\|replay recorded\|not pinned" /tmp/log-$label | head -3
  grep -i "error\|panic" /tmp/log-$label | head -3
}
compare() { # $1 $2 labels
  if cmp -s /tmp/ids-$1 /tmp/ids-$2 && cmp -s /tmp/ids-lp-$1 /tmp/ids-lp-$2; then echo "$1 = $2: same tokens"
  else echo "$1 vs $2: tokens differ"; head -c 400 /tmp/ids-$1; echo; head -c 400 /tmp/ids-$2; echo; fi
}
if [ "$which" = lookahead ]; then
  for tp in 1 2; do
    devs=0; [ $tp = 2 ] && devs=0,1
    LOOKAHEAD=0 run tp$tp-noahead 1 --backend cuda --devices $devs --tp $tp
    LOOKAHEAD=1 run tp$tp-ahead 1 --backend cuda --devices $devs --tp $tp
    compare tp$tp-noahead tp$tp-ahead
  done
  exit 0
fi
if [ "$which" != tp2 ]; then
  run tp1-eager 0 --backend cuda --devices 0
  run tp1-graph 1 --backend cuda --devices 0
  compare tp1-eager tp1-graph
fi
if [ "$which" != tp1 ]; then
  run tp2-eager 0 --backend cuda --devices 0,1 --tp 2
  run tp2-graph 1 --backend cuda --devices 0,1 --tp 2
  compare tp2-eager tp2-graph
fi
