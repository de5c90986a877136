#!/usr/bin/env python3
"""Summarise the bench runs of a gpu-suite.sh log (ablate, abenv, abbin, ab).

Every step `== name: command` followed by bench's JSON line is one run.
Runs are grouped by name without a trailing -<round> (abenv's base-1,
base-2, ... are one group); a group prints its graph decode rate (min-max),
step time, the fed graph decode rate (the replays queued back to back,
tokens fed on the device) where bench measured one, and the fastest run's
share of bench's weight-bytes roofline. With a group named base (ablate, abenv), every other group
also prints its step time less base's: for ablate-<tags> what the tagged
launches cost inside the captured step.

Where the runs carry round numbers (abn, abbin, abenv: name-1, name-2, ...),
each group is then paired round by round with the reference (base, or else
the first group, abn's first entry): the mean difference of the fed rate
(the graph rate where bench measured no fed one) and how many rounds it is
ahead. A round's runs are interleaved, so the host's drift between calls and
within one largely cancels in these differences, which the min-max ranges
above do not show: a lever worth +0.2% reads as ahead in most rounds.

    python3 scripts/bench-summary.py gpu-out/ablate.txt
"""
import json
import re
import sys
from collections import OrderedDict


def paired(rounds, ref):
    """Lines comparing every group's rounds with ref's: {group: {round: rate}}."""
    out = []
    for key, by in rounds.items():
        if key == ref:
            continue
        common = sorted(set(by) & set(rounds[ref]))
        if not common:
            continue
        d = [by[i] - rounds[ref][i] for i in common]
        mean = sum(d) / len(d)
        pct = 100 * mean / (sum(rounds[ref][i] for i in common) / len(common))
        ahead = sum(1 for x in d if x > 0)
        out.append(
            f"{key:<48} {mean:+8.2f} tok/s ({pct:+.2f}%) vs {ref}, ahead in {ahead} of {len(d)} rounds,"
            f" by {min(d):+.1f} to {max(d):+.1f}"
        )
    return out


def runs(path):
    name = None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"== (\S+?): (?!rc=)", line)
        if m:
            name = m.group(1)
            continue
        if name and line.startswith("{"):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            # The graph rate whenever bench measured one: an ablated run's
            # graph disagrees with its eager decode, and bench then reports
            # the eager rate as decode_tokens_per_s.
            tps = j.get("decode_graph_tokens_per_s") or j.get("decode_tokens_per_s")
            if tps:
                yield name, tps, j.get("decode_graph_fed_tokens_per_s"), j.get("roofline_tokens_per_s")
            name = None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    groups, fed, roof, rounds = OrderedDict(), {}, {}, OrderedDict()
    for name, tps, ftps, rtps in runs(sys.argv[1]):
        key = re.sub(r"-(\d+|again)$", "", name)
        groups.setdefault(key, []).append(tps)
        r = re.search(r"-(\d+)$", name)
        if r:
            rounds.setdefault(key, {})[int(r.group(1))] = ftps or tps
        if ftps:
            fed.setdefault(key, []).append(ftps)
        if rtps:
            roof[key] = rtps
    if not groups:
        sys.exit("no bench runs in " + sys.argv[1])
    base = groups.get("base")
    base_ms = None
    if base:
        base_ms = sum(1e3 / t for t in base) / len(base)
    print(f"{'run':<48} {'tok/s':>17} {'step ms':>8} {'vs base ms':>10} {'fed tok/s':>17} {'best/roofline':>13}")
    for key, v in groups.items():
        ms = sum(1e3 / t for t in v) / len(v)
        rate = f"{min(v):.1f}" if len(v) == 1 else f"{min(v):.1f}-{max(v):.1f}"
        d = f"{base_ms - ms:+.3f}" if base_ms and key != "base" else ""
        f = fed.get(key, [])
        frate = "" if not f else f"{min(f):.1f}" if len(f) == 1 else f"{min(f):.1f}-{max(f):.1f}"
        # The fastest run's share of bench's weight-bytes roofline (4.26 TB/s).
        share = f"{100 * max(v + f) / roof[key]:.1f}%" if key in roof else ""
        print(f"{key:<48} {rate:>17} {ms:>8.3f} {d:>10} {frate:>17} {share:>13}")
    if len(rounds) > 1:
        ref = "base" if "base" in rounds else next(iter(rounds))
        lines = paired(rounds, ref)
        if lines:
            print("paired by round (fed rate where measured):")
            print("\n".join(lines))


if __name__ == "__main__":
    main()
