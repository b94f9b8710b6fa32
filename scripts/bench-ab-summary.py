#!/usr/bin/env python3
"""Medians of scripts/device-bench-compare.sh's runs, per row and variant, and ratios to the base.

    python3 scripts/bench-ab-summary.py bench_all.txt [--column streampool]

Reads the "== bench_<variant>_<round>.txt" headers and table rows that the compare script appends
to $OUT/bench_all.txt. Prints a markdown table: for each row of the benchmark's tables, each
variant's median and minimum over its rounds, and each variant's median over the base's (the
variant named base, else the last): above 1 is slower for ns rows, faster for rate rows (M pairs/s).
"""
import argparse
import re
import statistics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--column", default="streampool", help="the column to compare (a header name)")
    args = ap.parse_args()
    values: dict[str, dict[str, list[float]]] = {}
    order: list[str] = []
    variant = None
    column = None
    with open(args.file, encoding="utf-8") as f:
        for line in f:
            header = re.match(r"== bench_(\w+?)_(\d+)\.txt", line)
            if header:
                variant = header[1]
                if variant not in order:
                    order.append(variant)
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if args.column in cells:  # a table's header row
                column = cells.index(args.column)
                continue
            if not any(re.fullmatch(r"[0-9.]+", c) for c in cells[1:]):
                column = None  # another table's header (no such column): its rows are skipped
                continue
            if variant is None or column is None or len(cells) <= column:
                continue
            try:
                v = float(cells[column])
            except ValueError:
                continue
            values.setdefault(cells[0], {}).setdefault(variant, []).append(v)
    if not order:
        raise SystemExit(f"{args.file}: no '== bench_<variant>_<round>.txt' runs")
    base = "base" if "base" in order else order[-1]
    order = [v for v in order if v != base] + [base]
    print("| row | " + " | ".join(f"{v} median (min)" for v in order) + " | " +
          " | ".join(f"{v} / {base}" for v in order[:-1]) + " |")
    print("|---|" + "---:|" * (2 * len(order) - 1))
    for row, by in values.items():
        if base not in by:
            continue
        cells = [f"{statistics.median(by[v]):.2f} ({min(by[v]):.2f})" if v in by else "-"
                 for v in order]
        ratios = [f"{statistics.median(by[v]) / statistics.median(by[base]):.3f}" if v in by else "-"
                  for v in order[:-1]]
        print(f"| {row} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
