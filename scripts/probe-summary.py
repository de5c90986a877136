#!/usr/bin/env python3
"""Lays out the decode step from in-graph probe records (kernels/cuda/probe.cuh).

    python3 scripts/probe-summary.py PATH [--steps N] [--timeline] [--pairs] [--blocks KERNEL]

PATH.log is the backend's launch log (one "name gx gy bx" line per launch, "# capture" /
"# end capture" around graph captures); PATH.bin holds a record per probed block: gridid,
block << 32 | smid << 20 | blocks, start, wait (0: none), end, the first warp's end and the
kernel's two marks (PROBE_MARK, PROBE_MARK2; all ones: none) in ns.

The last captured graph is the decode step. Probed launches are matched to its nodes by
gridid (consecutive within a replay) and checked by block count; launches of unprobed
modules leave gaps. For every node the summary gives, averaged over the last N whole steps (default 2; each module keeps
its last 2048 launches, 4-8 steps of the models measured):
  start  when its first block started, from the step's first probed start (µs)
  wait   when its first block passed griddepcontrol.wait
  end50  when half its blocks had ended
  end    when its last block ended
  crit   end minus the previous probed node's end: its share of the critical path
  span   end minus start; blocks; SMs its blocks ran on
  rel    wait minus the previous probed node's end: how long after its predecessor ended
         the wait returned (an unprobed node between them adds its own time)
  wsp    a block's last warp's end minus its first's, averaged over the blocks: against
         end - end50, whether a GEMV's tail is its warps' own (warps of a block end apart)
         or its SMs' (a block's warps end together, blocks apart)
and a table by kernel name: crit summed, the mean rel and time from the wait to the
last block's end, and where the kernel marks a point (PROBE_MARK) the mean over its blocks of
mark minus wait (the FP8 rings: the activation staged).
"""
import argparse
import collections
import struct
import sys


# PROBE_BLOCKS of kernels/cuda/probe.cuh: blocks past it are not recorded.
PROBE_BLOCKS = 2048

def load(path):
    with open(path + ".log") as f:
        log = [l.rstrip("\n") for l in f]
    recs = collections.defaultdict(list)
    with open(path + ".bin", "rb") as f:
        data = f.read()
    # probe.go's records: eight fields of 8 bytes (probeRecord).
    for off in range(0, len(data) - 63, 64):
        grid, b, start, wait, end, first, mark, mark2 = struct.unpack_from("<QQQQQQQQ", data, off)
        blk, sm, n = b >> 32, (b >> 20) & 0xFFF, b & 0xFFFFF
        recs[grid].append((blk, sm, n, start, wait if 0 < wait < 2**64 - 1 else None, end,
                           first if 0 < first <= end else None, mark if 0 < mark <= end else None,
                           mark2 if 0 < mark2 <= end else None))
    # A launch whose slots a later one of fewer blocks took over keeps only
    # some of its records: incomplete, left out.
    for g in [g for g, rs in recs.items() if len(rs) < min(rs[0][2], PROBE_BLOCKS) or any(r[5] < r[3] for r in rs)]:
        del recs[g]
    return log, recs


def step_nodes(log):
    """The nodes of the last complete capture: [(name, blocks)]."""
    begin = end = None
    for i, l in enumerate(log):
        if l == "# capture":
            begin = i
        elif l == "# end capture" and begin is not None:
            end = i
    if begin is None or end is None:
        sys.exit("no graph capture in the log")
    nodes = []
    for l in log[begin + 1:end]:
        if l.startswith("#"):
            continue
        name, gx, gy, _ = l.split()
        nodes.append((name, int(gx) * int(gy)))
    return nodes


def align(nodes, grids):
    """The stride S and gridid offset o such that node (g - o) % S is launch g, best by block
    counts: a replay's nodes take N consecutive gridids, and launches between replays (an argmax
    after each, or a copy the driver runs as a kernel) take the S - N after them."""
    N = len(nodes)
    best = None
    for S in range(N, N + 4):
        for o in range(S):
            ok = sum(1 for g, n in grids.items() if (g - o) % S < N and nodes[(g - o) % S][1] == n)
            if best is None or ok > best[2]:
                best = (S, o, ok)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--timeline", action="store_true", help="print every node of the steps, not only the totals")
    ap.add_argument("--blocks", default="", help="print the blocks of the step's middle launch of this kernel (the last step used)")
    ap.add_argument("--pairs", action="store_true",
                    help="print, for each (predecessor, kernel) pair of consecutive probed nodes, how long after the "
                         "predecessor's last block the kernel's wait returned and how many of its blocks were resident by then")
    a = ap.parse_args()
    log, recs = load(a.path)
    ts = sorted({r[3] for rs in recs.values() for r in rs})
    steps_ns = [b - a for a, b in zip(ts, ts[1:]) if b > a]
    print(f"timer: smallest step between distinct start times {min(steps_ns) if steps_ns else 0} ns")
    nodes = step_nodes(log)
    N = len(nodes)
    grids = {g: rs[0][2] for g, rs in recs.items()}
    # Aligned on the last few steps' launches: earlier ones may be another phase's (bench replays
    # its step host-fed, then fed), whose replays sit at another offset.
    top = max(grids)
    S_, o, ok = align(nodes, {g: n for g, n in grids.items() if g > top - 6 * N})
    print(f"{len(recs)} probed launches; the step has {N} launches; aligned at stride {S_}, offset {o}: "
          f"{ok}/{len(grids)} block counts match")
    # Steps: gridids o + kS .. o + kS + N - 1; keep the last whole ones (every probed node present).
    # Launches that are not the graph's (their block count is not their
    # node's) are left out; the probed nodes are those most steps have.
    steps = collections.defaultdict(dict)
    for g in recs:
        if (g - o) % S_ < N and nodes[(g - o) % S_][1] == grids[g]:
            steps[(g - o) // S_][(g - o) % S_] = g
    # Each module's table keeps its own last launches, so older steps hold
    # only some modules' records: look at the last few steps only.
    recent = sorted(steps)[-(a.steps + 2):]
    seen = collections.Counter(i for k in recent for i in steps[k])
    probed = sorted(i for i, c in seen.items() if 2 * c >= len(recent))
    whole = [k for k in recent if all(i in steps[k] for i in probed)]
    use = whole[-a.steps:]
    if not use:
        sys.exit("no whole step in the records")
    print(f"steps used: {len(use)} (of {len(whole)} whole); unprobed nodes: "
          + ", ".join(sorted({nodes[i][0] for i in range(N) if i not in probed})))
    acc = collections.defaultdict(lambda: [0.0] * 9)
    # (predecessor, kernel): [pairs, rel sum, blocks started before the predecessor's end, blocks]
    pairs = collections.defaultdict(lambda: [0, 0.0, 0, 0])
    step_ns = []
    for k in use:
        t0 = min(min(r[3] for r in recs[g]) for g in steps[k].values())
        prev_end = None
        prev_name = None
        last = 0
        for i in probed:
            rs = recs[steps[k][i]]
            start = min(r[3] for r in rs) - t0
            waits = [r[4] for r in rs if r[4] is not None]
            wait = (min(waits) - t0) if waits else float("nan")
            ends = sorted(r[5] for r in rs)
            end = ends[-1] - t0
            e50 = ends[len(ends) // 2] - t0
            crit = end - (prev_end if prev_end is not None else start)
            rel = wait - prev_end if prev_end is not None else float("nan")
            if rel == rel:  # not NaN: a wait and a predecessor
                p = pairs[(prev_name, nodes[i][0])]
                p[0] += 1
                p[1] += rel
                p[2] += sum(1 for r in rs if r[3] - t0 < prev_end)
                p[3] += len(rs)
            prev_name = nodes[i][0]
            prev_end = end
            last = max(last, end)
            v = acc[i]
            v[0] += start
            v[1] += wait
            v[2] += end
            v[3] += crit
            v[4] += end - start
            v[5] += len({r[1] for r in rs})
            v[6] += e50
            v[7] += rel
            fw = [r[5] - r[6] for r in rs if r[6] is not None]
            v[8] += sum(fw) / len(fw) if fw else float("nan")
        step_ns.append(last)
    S = len(use)
    print(f"step span (first probed start to last probed end): {sum(step_ns) / S / 1e3:.1f} µs")
    # Between replays: the next step's first probed start after this step's last probed end
    # (the host's sync and launch, the arena's upload; fed steps queued back to back: the upload
    # and the graph's own launch only).
    gaps = []
    for k in whole:
        if k + 1 in whole:
            end = max(max(r[5] for r in recs[g]) for g in steps[k].values())
            nxt = min(min(r[3] for r in recs[g]) for g in steps[k + 1].values())
            gaps.append(nxt - end)
    if gaps:
        print(f"between consecutive steps ({len(gaps)}): {min(gaps) / 1e3:.1f}-{max(gaps) / 1e3:.1f} µs, "
              f"mean {sum(gaps) / len(gaps) / 1e3:.1f}")
    by = collections.defaultdict(lambda: [0.0, 0, 0.0, 0.0, 0])
    # kernel: [sum over blocks of mark - wait, blocks, of mark2 - wait, blocks], every step used
    marks = collections.defaultdict(lambda: [0.0, 0, 0.0, 0])
    for k in use:
        for i in probed:
            for r in recs[steps[k][i]]:
                m = marks[nodes[i][0]]
                if r[7] is not None and r[4] is not None:
                    m[0] += r[7] - r[4]
                    m[1] += 1
                if r[8] is not None and r[4] is not None:
                    m[2] += r[8] - r[4]
                    m[3] += 1
    if a.timeline:
        print(f"{'#':>4} {'kernel':28} {'blocks':>6} {'SMs':>4} {'start':>8} {'wait':>8} {'end50':>8} {'end':>8} {'crit':>7} {'span':>7} {'rel':>6} {'wsp':>6}")
    for i in probed:
        v = [x / S for x in acc[i]]
        name, blocks = nodes[i]
        by[name][0] += v[3]
        by[name][1] += 1
        if v[7] == v[7] and v[1] == v[1]:  # not NaN: a wait and a predecessor
            by[name][2] += v[7]
            by[name][3] += v[2] - v[1]
            by[name][4] += 1
        if a.timeline:
            print(f"{i:4d} {name[:28]:28} {blocks:6d} {v[5]:4.0f} {v[0]/1e3:8.2f} {v[1]/1e3:8.2f} {v[6]/1e3:8.2f} {v[2]/1e3:8.2f} {v[3]/1e3:7.2f} {v[4]/1e3:7.2f} {v[7]/1e3:6.2f} {v[8]/1e3:6.2f}"
                  + (" *" if blocks > PROBE_BLOCKS else ""))
    if a.timeline and any(nodes[i][1] > PROBE_BLOCKS for i in probed):
        # Qwen3.5-27B's bf16 LM head (7760 blocks): 170 µs here, 498 µs by POCKET_ABLATE.
        print(f"* more blocks than the probe records (PROBE_BLOCKS, the lowest {PROBE_BLOCKS} ids): end50, end and crit "
              "are those blocks', not the launch's; price such a launch with gpu-suite.sh ablate")
    if a.blocks:
        k = use[-1]
        hits = [i for i in probed if nodes[i][0] == a.blocks]
        for i in hits[len(hits) // 2:len(hits) // 2 + 1]:  # the middle launch of the step
            rs = sorted(recs[steps[k][i]], key=lambda r: r[5])
            t0 = min(r[3] for r in rs)
            print(f"node {i} {a.blocks}: blocks by end (µs from the first start): block sm start wait end first-warp-end mark mark2")
            for r in rs:
                w = f"{(r[4] - t0) / 1e3:7.2f}" if r[4] is not None else "      -"
                fw = f"{(r[6] - t0) / 1e3:7.2f}" if r[6] is not None else "      -"
                mk = " ".join(f"{(r[j] - t0) / 1e3:7.2f}" if r[j] is not None else "      -" for j in (7, 8))
                print(f"  {r[0]:5d} {r[1]:4d} {(r[3] - t0) / 1e3:7.2f} {w} {(r[5] - t0) / 1e3:7.2f} {fw} {mk}")
    if a.pairs:
        # A kernel's wait returns when its predecessor's grid has completed; rel is how long after
        # the predecessor's last probed block that was, resident is the share of its blocks that
        # had started by then (a wait cannot return in a block that is not yet resident).
        print(f"{'predecessor':28} {'kernel':28} {'pairs':>5} {'rel µs':>7} {'resident':>8}")
        for (pn, n), (c, rel, early, blocks) in sorted(pairs.items(), key=lambda kv: -kv[1][1]):
            print(f"{pn[:28]:28} {n[:28]:28} {c:5d} {rel / c / 1e3:7.2f} {100 * early / blocks:7.0f}%")
    print(f"{'kernel':32} {'launches':>8} {'crit µs':>9} {'µs each':>8} {'share':>6} {'rel':>6} {'after wait':>10} {'mark':>6} {'mark2':>6}")
    tot = sum(x[0] for x in by.values())
    for name, (c, n, rel, post, m) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        tail = f" {rel/m/1e3:6.2f} {post/m/1e3:10.2f}" if m else ""
        if marks[name][1] or marks[name][3]:
            tail = (tail or " " * 18) + "".join(
                f" {marks[name][j] / marks[name][j + 1] / 1e3:6.2f}" if marks[name][j + 1] else "      -" for j in (0, 2))
        print(f"{name[:32]:32} {n:8d} {c/1e3:9.1f} {c/n/1e3:8.2f} {100*c/tot:5.1f}%{tail}")


if __name__ == "__main__":
    main()
