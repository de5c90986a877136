#!/usr/bin/env bash
# Sampled decoding through the daemon against greedy, on one GPU or a
# tensor-parallel group (DEVICES=0,1): what a sampled step costs beyond a
# greedy one (the rank's draw: on the device, or the host's with
# POCKET_DEVICE_DRAW=0). Qwen3-0.6B-shaped bf16 (152K vocabulary) by
# default, MODEL=shape to change it (or MODEL_DIR=checkpoint). Penalised
# and biased generations, greedy and sampled, run twice: drawn on the
# device and with POCKET_DEVICE_DRAW=0 on the host; the greedy ones' ids
# must be the same both ways (the same logits, the same Adjust, an argmax).
#   BIN=.gpud bash scripts/gpu-daemon-sampled.sh
set -u
export NCCL_NVLS_ENABLE=0 NCCL_CUMEM_ENABLE=0
D=${BIN:-$(cd "$(dirname "$0")" && pwd)}
for f in "$D"/*.tar.xz; do [ -e "$f" ] && tar -xJf "$f" -C "$D" && rm -f "$f"; done
shape=${MODEL:-qwen3-0.6b}
m=${MODEL_DIR:-/tmp/m-$shape} # MODEL_DIR: a checkpoint as it is (e.g. a fixture)
[ -n "${MODEL_DIR:-}" ] || [ -e $m/.done ] || { $D/pocket-worker synth --shape $shape --out $m >/dev/null 2>&1 && touch $m/.done; } || { echo synth failed; exit 1; }
vocab=$(python3 -c "import json; print(json.load(open('$m/config.json'))['vocab_size'])")
prompt=$(python3 -c "import random; random.seed(5); print(','.join(str(random.randrange($vocab)) for _ in range(256)))")
sock=/tmp/pd-sampled.sock
api() { curl -s --max-time 120 --unix-socket $sock "http://pocketd$1" ${2:+-d "$2"}; }
gen() { # label body: tokens generated (not assumed: a sampled EOS ends early) over the call's time;
  # the session is cut back to the prompt after each, so every generation continues the same context
  t0=$(date +%s.%N)
  api /v0/sessions/$id/generate "$2" > /tmp/gen-sampled.json
  t1=$(date +%s.%N)
  api /v0/sessions/$id/truncate '{"length":256}' > /dev/null
  python3 - "$1" "$t0" "$t1" "$draw" <<'PY'
import json, sys
label, t0, t1, draw = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
r = json.load(open("/tmp/gen-sampled.json"))
ids = r.get("ids") or []
n = len(ids)
print(f"[{draw}] {label}: {n} tokens, {n/(t1-t0):.1f} tok/s, finish {r.get('finish_reason')}, first ids {ids[:6]}")
with open(f"/tmp/ids-{draw}.txt", "a") as f:
    f.write(f"{label}\t{ids}\n")
PY
}
serve() { # draw (device|host): start the daemon, run the generations, stop it
  draw=$1
  rm -rf /tmp/st-sampled /tmp/ids-$draw.txt
  if [ $draw = host ]; then export POCKET_DEVICE_DRAW=0; else unset POCKET_DEVICE_DRAW; fi
  $D/pocketd serve --model $m --socket $sock --listen off --state-dir /tmp/st-sampled --backend cuda --devices ${DEVICES:-0} > /tmp/log-sampled-$draw 2>&1 &
  pid=$!
  for i in $(seq 1 120); do api /v0/health 2>/dev/null | grep -q '"ok"' && break; sleep 1; done
  name=$(basename $m)
  id=$(api /v0/sessions "{\"model\":\"$name\"}" | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
  api /v0/sessions/$id/append "{\"tokens\":[$prompt]}" > /dev/null
  api /v0/sessions/$id/generate '{"max_tokens":16,"temperature":0}' > /dev/null # warm-up
  api /v0/sessions/$id/truncate '{"length":256}' > /dev/null
  rounds=2; [ $draw = host ] && rounds=1
  for r in $(seq 1 $rounds); do
    if [ $draw = device ]; then
      gen greedy '{"max_tokens":128,"temperature":0}'
      gen "temperature 0.7" '{"max_tokens":128,"temperature":0.7,"seed":1}'
      gen "temperature 0.7, top_p 0.9" '{"max_tokens":128,"temperature":0.7,"top_p":0.9,"seed":1}'
      gen "temperature 0.6, top_k 20, top_p 0.95" '{"max_tokens":128,"temperature":0.6,"top_k":20,"top_p":0.95,"seed":1}'
    fi
    gen "greedy, repetition 1.1, presence 0.5" '{"max_tokens":128,"temperature":0,"repetition_penalty":1.1,"presence_penalty":0.5}'
    gen "greedy, frequency 0.8, bias 42=+20" '{"max_tokens":128,"temperature":0,"frequency_penalty":0.8,"logit_bias":{"42":20}}'
    gen "temperature 0.7, top_p 0.95, repetition 1.1, presence 0.5" '{"max_tokens":128,"temperature":0.7,"top_p":0.95,"repetition_penalty":1.1,"presence_penalty":0.5,"seed":1}'
  done
  kill $pid; wait $pid 2>/dev/null
  grep -i "error\|panic" /tmp/log-sampled-$draw | head -3
}
serve device
serve host
python3 - <<'PY'
dev = dict(l.rstrip("\n").split("\t") for l in open("/tmp/ids-device.txt"))
host = dict(l.rstrip("\n").split("\t") for l in open("/tmp/ids-host.txt"))
for label in host:
    same = dev.get(label) == host[label]
    kind = "must match" if label.startswith("greedy") else "may differ by a rounding"
    print(f"device vs host draw, {label}: {'same ids' if same else 'DIFFERENT ids'} ({kind})")
    if label.startswith("greedy") and not same:
        print("FAIL")
PY
