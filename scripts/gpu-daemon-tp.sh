#!/usr/bin/env bash
# TP2 (and TP4 where four GPUs are there) vs TP1 through the daemon: same session ops,
# same tokens? A rank of the TP group is killed after the fork; the group must rebuild.
set -u
export NCCL_NVLS_ENABLE=0 NCCL_CUMEM_ENABLE=0
D=${BIN:-$(cd "$(dirname "$0")" && pwd)}  # folder holding pocketd and pocket-worker
$D/pocket-worker synth --shape llama3-8b --out /tmp/l8b >/dev/null 2>&1 || { echo synth failed; exit 1; }
prompt=$(python3 -c "import random; random.seed(5); print(','.join(str(random.randrange(128256)) for _ in range(200)))")
sock=/tmp/pd.sock
api() { curl -s --max-time 120 --unix-socket $sock "http://pocketd$1" ${2:+-d "$2"}; }
run() { # $1 label, rest: serve flags
  label=$1; shift
  rm -rf /tmp/st-$label
  $D/pocketd serve --model /tmp/l8b --socket $sock --listen off --state-dir /tmp/st-$label "$@" > /tmp/log-$label 2>&1 &
  pid=$!
  for i in $(seq 1 120); do api /v0/health 2>/dev/null | grep -q '"ok"' && break; sleep 1; done
  api /v0/health; echo
  id=$(api /v0/sessions '{"model":"l8b"}' | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
  api /v0/sessions/$id/append "{\"tokens\":[$prompt]}"; echo
  t0=$(date +%s.%N)
  g1=$(api /v0/sessions/$id/generate '{"max_tokens":64,"temperature":0}')
  t1=$(date +%s.%N)
  echo "$label gen1 $(echo "$g1" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['ids'])")"
  echo "$label gen1 seconds $(python3 -c "print($t1-$t0)")"
  f=$(api /v0/sessions/$id/fork '{"at":150}' | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
  echo "$label fork $(api /v0/sessions/$f/generate '{"max_tokens":16,"temperature":0}' | python3 -c "import json,sys; print(json.load(sys.stdin)['ids'])")"
  if [ "$label" != tp1 ]; then
    rk=$(pgrep -f "serve-rank" | tail -1); echo "killing rank pid $rk"; kill -9 $rk; sleep 1
    echo "$label after-kill $(api /v0/sessions/$id/generate '{"max_tokens":16,"temperature":0}' | python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('ids'), d.get('error'))")"
    api /v0/health; echo
  else
    echo "$label after-kill $(api /v0/sessions/$id/generate '{"max_tokens":16,"temperature":0}' | python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('ids'))")"
  fi
  kill $pid; wait $pid 2>/dev/null
  grep -i "error\|panic" /tmp/log-$label | head -5
}
run tp1 --backend cuda --devices 0
run tp2 --backend cuda --devices 0,1 --tp 2
[ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 4 ] && run tp4 --backend cuda --devices 0,1,2,3 --tp 4
