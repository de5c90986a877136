#!/usr/bin/env python3
"""Summarise an `ncu --csv --metrics gpu__time_duration.sum` export: device
time per kernel name (count, total, mean), largest first, and the total.
With --by-grid, per kernel name and grid size (one kernel serving several
matrices, e.g. qmv for q/k/v, o and down, shows as one line per shape).
Used by scripts/gpu-suite.sh's profile stages."""
import csv
import sys
from collections import defaultdict

by_grid = "--by-grid" in sys.argv[1:]
rows = list(csv.reader(open([a for a in sys.argv[1:] if not a.startswith("--")][0])))
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]
name_i, val_i, unit_i = cols.index("Kernel Name"), cols.index("Metric Value"), cols.index("Metric Unit")
grid_i = cols.index("Grid Size") if by_grid and "Grid Size" in cols else -1
tot, cnt = defaultdict(float), defaultdict(int)
for r in rows[head + 1:]:
    if len(r) <= val_i or not r[val_i]:
        continue
    v = float(r[val_i].replace(",", ""))
    unit = r[unit_i]
    us = v / 1000 if unit in ("nsecond", "ns") else v * 1000 if unit in ("msecond", "ms") else v
    name = r[name_i].split("(")[0]
    if grid_i >= 0:
        name += " " + r[grid_i].replace(" ", "")
    tot[name] += us
    cnt[name] += 1
total = sum(tot.values())
print(f"{'kernel':40s} {'count':>6s} {'total us':>10s} {'mean us':>9s} {'share':>6s}")
for n in sorted(tot, key=tot.get, reverse=True):
    print(f"{n[:40]:40s} {cnt[n]:6d} {tot[n]:10.1f} {tot[n]/cnt[n]:9.2f} {100*tot[n]/total:5.1f}%")
print(f"{'total':40s} {sum(cnt.values()):6d} {total:10.1f}")
