"""End-to-end benchmark: PyTorch workloads under each allocator, each run in its own process, the
allocator order alternated round by round, all in one call (so on one machine).

    STREAMPOOL_LIBRARY=build/release/libstreampool.so \\
        python3 bench/torch/run.py --rounds 3 --steps 40 --out results.json

Prints, per workload, one markdown table: median and minimum step time over all rounds (and each
round's median), the ratio to PyTorch's native allocator and to cudaMallocAsync, peak reserved,
upstream calls and host waits per timed step, and the correctness check (ResNet-50 losses bit for
bit against native; GPT-2 losses against native's own spread between rounds; server tokens
identical). bench/RESULTS.md records the tables.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from allocators import NAMES  # this folder's: the names workload.py accepts

HERE = os.path.dirname(os.path.abspath(__file__))
ALLOCATORS = ["native", "async", "expandable", "streampool"]


def run_one(allocator, workload, steps, warmup, out_dir, round_no, profile=0):
    path = os.path.join(out_dir, f"{workload}-{allocator}-{round_no}.json")
    cmd = [sys.executable, os.path.join(HERE, "workload.py"), "--allocator", allocator,
           "--workload", workload, "--steps", str(steps), "--warmup", str(warmup), "--json", path]
    if profile and workload != "server":
        cmd += ["--profile", str(profile)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.stderr.write(f"{workload}/{allocator} round {round_no} failed ({p.returncode}):\n"
                         f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}\n")
        return None
    with open(path) as f:
        r = json.load(f)
    r["round"] = round_no
    prof = r.get("profile")
    print(f"  {workload:9s} {allocator:11s} round {round_no}: median "
          f"{statistics.median(r['step_ms']):.2f} ms, peak reserved "
          f"{r['peak_reserved'] / 2**20:,.0f} MiB ({time.time() - t0:.0f} s)"
          + (f"; profiled: wall {prof['wall_ms_per_step']:.2f} ms, device "
             f"{prof['device_ms_per_step']:.2f} ms per step" if prof else ""), flush=True)
    return r


def order(round_no):
    # Alternate: forward, backward, then rotated, so no allocator always runs first or last.
    o = list(ALLOCATORS)
    if round_no % 2 == 1:
        o.reverse()
    k = round_no // 2 % len(o)
    return o[k:] + o[:k]


def mean_of(per_steps, key):
    vals = [s[key] for s in per_steps if key in s]
    return statistics.mean(vals) if vals else None


def fmt(v, spec=".2f"):
    return "n/a" if v is None else format(v, spec)


def report(workload, runs):
    by = {a: [r for r in runs if r and r["allocator"] == a] for a in ALLOCATORS}
    server = workload == "server"
    med = {a: statistics.median([t for r in rs for t in r["step_ms"]]) if rs else None
           for a, rs in by.items()}
    lines = [f"\n### {workload}\n"]
    if server:
        lines.append("| allocator | items/s, median (rounds) | vs native | vs cudaMallocAsync | "
                     "peak reserved MiB (max) | upstream calls / item | upstream calls / step "
                     "after step 3 (rounds) | host waits / item | device waits / item | tokens |")
    else:
        lines.append("| allocator | median step ms (rounds) | min ms | vs native | vs cudaMallocAsync "
                     "| host CPU ms / step | peak reserved MiB (max) | upstream calls / step | "
                     "host waits / step | losses |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|" if not server else
                 "|---|---|---:|---:|---:|---:|---|---:|---:|---|")
    native = by.get("native", [])
    for a in ALLOCATORS:
        rs = by[a]
        if not rs:
            lines.append(f"| {NAMES[a]} | failed | | | | | | | |")
            continue
        peak = max(r["peak_reserved"] for r in rs) / 2**20
        per_steps = [s for r in rs for s in r["per_step"]]
        calls = mean_of(per_steps, "upstream_calls")
        waits = mean_of(per_steps, "host_waits")
        if server:
            ips = [r["items_per_s"] for r in rs]
            m = statistics.median(ips)
            nat = statistics.median([r["items_per_s"] for r in native]) if native else None
            asy = (statistics.median([r["items_per_s"] for r in by["async"]])
                   if by.get("async") else None)
            same = all(r["tokens"] == native[0]["tokens"] for r in rs) if native else None
            dwaits = mean_of(per_steps, "device_waits")
            # The steady-state target: no driver call per step after step 3 (warm-up included;
            # a step is one batch per worker). Per round: the mean over those steps.
            late = [statistics.mean(r["calls_by_step"][4:]) for r in rs
                    if len(r.get("calls_by_step", [])) > 4]
            lines.append(
                f"| {NAMES[a]} | {m:.1f} ({', '.join(f'{x:.1f}' for x in ips)}) | "
                f"{fmt(m / nat if nat else None, '.3f')} | {fmt(m / asy if asy else None, '.3f')} | "
                f"{peak:,.0f} | {fmt(calls)} | "
                f"{', '.join(f'{x:.2f}' for x in late) if late else 'n/a'} | "
                f"{fmt(waits)} | {fmt(dwaits)} | "
                f"{'identical' if same else 'DIFFER' if same is False else 'n/a'} |")
            continue
        rounds = ", ".join(f"{statistics.median(r['step_ms']):.2f}" for r in rs)
        mn = min(t for r in rs for t in r["step_ms"])
        check = "n/a"
        if "tokens" in rs[0]:  # generation: tokens against native's, and against eager's
            same = all(r["tokens"] == native[0]["tokens"] for r in rs) if native else None
            eager = all(r.get("eager_tokens_match") for r in rs)
            check = (f"tokens: {'native' + chr(39) + 's' if same else 'DIFFER from native'}, "
                     f"{'eager' + chr(39) + 's' if eager else 'NOT eager' + chr(39) + 's'}")
        elif native and a != "native":
            ref = native[0]["losses"]
            if workload.startswith("resnet50"):
                check = ("bit-identical" if all(r["losses"] == ref for r in rs) else
                         f"DIFFER (max abs d {max(abs(x - y) for r in rs for x, y in zip(r['losses'], ref)):.3g})")
            else:
                spread = max((abs(x - y) for r in native[1:] for x, y in zip(r["losses"], ref)),
                             default=0.0)
                d = max(abs(x - y) for r in rs for x, y in zip(r["losses"], ref))
                check = f"max abs d {d:.3g} (native's own spread {spread:.3g})"
        elif a == "native" and len(native) > 1:
            same = all(r["losses"] == native[0]["losses"] for r in native)
            check = "reference" + (" (identical across rounds)" if same else "")
        # The host's own CPU time per step (median; before the step's final synchronize): a
        # step whose host time is close to its wall time is host-bound, and allocator overhead
        # shows in it directly.
        cpu = [s["cpu_ms"] for s in per_steps if "cpu_ms" in s]
        lines.append(
            f"| {NAMES[a]} | {med[a]:.2f} ({rounds}) | {mn:.2f} | "
            f"{fmt(med[a] / med['native'] if med.get('native') else None, '.3f')} | "
            f"{fmt(med[a] / med['async'] if med.get('async') else None, '.3f')} | "
            f"{fmt(statistics.median(cpu) if cpu else None)} | {peak:,.0f} | "
            f"{fmt(calls)} | {fmt(waits)} | {check} |")
    return "\n".join(lines)


def main():
    global ALLOCATORS
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--workloads", default="gpt2,resnet50,server")
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--out", default="torch-e2e.json")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="training: N more steps per run under torch.profiler (workload.py "
                         "--profile); each run's line then says its wall and device ms per step")
    ap.add_argument("--report", metavar="FILE",
                    help="run nothing: print the tables of an earlier --out FILE (also one that a "
                         "call cut short, which keeps every finished run)")
    args = ap.parse_args()
    if args.report:
        with open(args.report) as f:
            runs = json.load(f)
        seen = [r["allocator"] for rs in runs.values() for r in rs if r]
        ALLOCATORS = [a for a in NAMES if a in seen]
        for w, rs in runs.items():
            print(report(w, rs))
        return
    ALLOCATORS = args.allocators.split(",")
    out_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "runs")
    os.makedirs(out_dir, exist_ok=True)
    runs = {w: [] for w in args.workloads.split(",")}
    for rnd in range(args.rounds):
        for w in runs:
            print(f"round {rnd}: {w}: {' '.join(order(rnd))}", flush=True)
            for a in order(rnd):
                runs[w].append(run_one(a, w, args.steps, args.warmup, out_dir, rnd, args.profile))
                with open(args.out, "w") as f:  # after every run: a call cut short keeps its data
                    json.dump(runs, f)
    with open(args.out, "w") as f:
        json.dump(runs, f)
    for w, rs in runs.items():
        print(report(w, rs))
    print(graph_against_eager(runs))


def graph_against_eager(runs):
    """The captured ResNet-50 step's losses against eager ResNet-50's, allocator by allocator:
    replaying a captured step must compute what running it does, bit for bit."""
    lines = []
    for a in ALLOCATORS:
        graph = [r for r in runs.get("resnet50-graph", []) if r and r["allocator"] == a]
        eager = [r for r in runs.get("resnet50", []) if r and r["allocator"] == a]
        if graph and eager:
            n = min(len(graph[0]["losses"]), len(eager[0]["losses"]))
            same = all(r["losses"][:n] == eager[0]["losses"][:n] for r in graph)
            lines.append(f"resnet50-graph vs resnet50, {NAMES[a]}: first {n} losses "
                         f"{'bit-identical' if same else 'DIFFER'}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
