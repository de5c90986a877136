#!/usr/bin/env python3
"""Session costs through a running pocketd, measured as a client sees them.

Drives the /v0 API over the daemon's Unix socket with random token ids,
greedy: the cold time to first token of a long session, an append of 64
tokens to it, a fork at its middle, and decode speed on both. Issue #5's
bars: append ≤ 5% and fork ≤ 10% of the cold TTFT. It also reports how many
greedy tokens a fork at the middle shares with a fresh session given the
same first half (fork_vs_fresh): a count, not a pass/fail, since a GPU's
prefill and decode kernels round differently and a random model has near
ties. Standard library only, so it runs on the GPU machine as it is.

    scripts/gpu-daemon-session.py --socket /tmp/p.sock --model l8b --vocab 128256 --context 7680
"""
import argparse
import http.client
import json
import random
import socket
import statistics
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("pocketd", timeout=600)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


class Client:
    def __init__(self, path):
        self.conn = UnixConnection(path)

    def call(self, method, url, body=None):
        self.conn.request(method, url, body=None if body is None else json.dumps(body),
                          headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {url}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None

    def metrics(self, names=("pocketd_forward_seconds_total", "pocketd_history_write")):
        """The daemon's time counters (forward passes, history writes), or other metrics by name prefix."""
        self.conn.request("GET", "/metrics")
        r = self.conn.getresponse()
        out = {}
        for line in r.read().decode().splitlines():
            for name in names:
                if line.startswith(name):
                    k, v = line.rsplit(" ", 1)
                    out[k] = float(v)
        return out

    def session(self, model):
        return self.call("POST", "/v0/sessions", {"model": model})["id"]

    def append(self, sid, tokens):
        return self.call("POST", f"/v0/sessions/{sid}/append", {"tokens": tokens})

    def generate(self, sid, n):
        return self.call("POST", f"/v0/sessions/{sid}/generate", {"max_tokens": n, "temperature": 0})

    def fork(self, sid, at):
        return self.call("POST", f"/v0/sessions/{sid}/fork", {"at": at})["id"]


def ttft(c, sid, tokens):
    """Append tokens and generate one: the time to first token a client sees."""
    t0 = time.perf_counter()
    if tokens:
        c.append(sid, tokens)
    c.generate(sid, 1)
    return time.perf_counter() - t0


def decode_rate(c, sid, n):
    t0 = time.perf_counter()
    out = c.generate(sid, n)
    dt = time.perf_counter() - t0
    got = len(out.get("ids") or out.get("tokens") or [])
    return (got or n) / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--context", type=int, default=7680)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rng = random.Random(5)
    toks = lambda n: [rng.randrange(a.vocab) for _ in range(n)]
    c = Client(a.socket)
    # Warm-up: module JIT, scratch buffers, graph recording.
    w = c.session(a.model)
    ttft(c, w, toks(600))
    decode_rate(c, w, 32)
    res = {"context": a.context}
    cold, cold_daemon = [], []
    for _ in range(2):
        s = c.session(a.model)
        prompt = toks(a.context)
        m0 = c.metrics()
        t0 = time.perf_counter()
        c.append(s, prompt)
        t1 = time.perf_counter()
        c.generate(s, 1)
        t2 = time.perf_counter()
        m1 = c.metrics()
        cold.append(t2 - t0)
        # Where a cold prompt's time went: the append and generate(1) calls, and the
        # daemon's own counters (its forward passes, history writes).
        d = {k.replace("pocketd_", "").replace("seconds_total", "ms"):
             round((m1[k] - m0.get(k, 0)) * (1e3 if "seconds" in k else 1), 1) for k in m1}
        d["calls_ms"] = [round((t1 - t0) * 1e3, 1), round((t2 - t1) * 1e3, 1)]
        cold_daemon.append(d)
    res["cold_ttft_ms"] = [round(x * 1e3, 1) for x in cold]
    res["cold_daemon"] = cold_daemon
    cold_ms = min(cold) * 1e3
    m0 = c.metrics()
    app, split = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        c.append(s, toks(64))
        t1 = time.perf_counter()
        c.generate(s, 1)
        t2 = time.perf_counter()
        app.append((t2 - t0) * 1e3)
        split.append([round((t1 - t0) * 1e3, 1), round((t2 - t1) * 1e3, 1)])
    m1 = c.metrics()
    res["append64_ms"] = [round(x, 1) for x in app]
    res["append64_split_ms"] = split  # [append call, generate(1) call]
    # Where the appends' time went, per append, from the daemon's counters.
    res["append64_daemon"] = {k.replace("pocketd_", "").replace("seconds_total", "ms"):
                              round((m1[k] - m0.get(k, 0)) * (1e3 if "seconds" in k else 1) / 5, 2) for k in m1}
    res["append64_share"] = round(statistics.median(app) / cold_ms, 4)
    half = a.context // 2
    fk = []
    for _ in range(3):
        f = c.fork(s, half)
        fk.append(ttft(c, f, []) * 1e3)
    res["fork_ms"] = [round(x, 1) for x in fk]
    res["fork_share"] = round(statistics.median(fk) / cold_ms, 4)
    res["decode_fork_tok_s"] = round(decode_rate(c, f, 64), 1)
    res["decode_long_tok_s"] = round(decode_rate(c, s, 128), 1)
    # The fork's continuation against a fresh session of the same first half.
    n = 32
    forked = c.generate(c.fork(s, half), n)
    fresh = c.session(a.model)
    c.append(fresh, prompt[:half])
    again = c.generate(fresh, n)
    fi = forked.get("ids") or forked.get("tokens") or []
    ai = again.get("ids") or again.get("tokens") or []
    same = next((i for i, (x, y) in enumerate(zip(fi, ai)) if x != y), min(len(fi), len(ai)))
    res["fork_vs_fresh"] = f"{same}/{n} equal before the first difference"
    short = c.session(a.model)
    ttft(c, short, toks(512))
    m0 = c.metrics()
    res["decode_512ctx_tok_s"] = round(decode_rate(c, short, 128), 1)
    m1 = c.metrics()
    # The same 128 tokens from the daemon's counters: its decode passes alone, and the
    # history write the call ended with (which the rate above includes).
    fwd = sum(v - m0.get(k, 0) for k, v in m1.items() if "forward_seconds" in k and 'kind="decode"' in k)
    hist = sum(v - m0.get(k, 0) for k, v in m1.items() if k.startswith("pocketd_history_write_seconds"))
    res["decode_512ctx_daemon"] = {"forward_tok_s": round(128 / fwd, 1) if fwd > 0 else None,
                                   "history_write_ms": round(hist * 1e3, 1)}
    # A hybrid's snapshots: kept by the daemon or held by the worker.
    res["snapshots"] = {k.replace("pocketd_", ""): v for k, v in c.metrics(("pocketd_state_snapshot",)).items()}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
