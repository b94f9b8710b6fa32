#!/usr/bin/env python3
"""The large-block decisions of a build, for comparing two builds: every trace of bench/traces/
replayed on the host backend (virtual memory and segments) at lags 0, 4 and 32, per stream and
shared, with and without the shelf; written as the lines that decide (peaks, upstream calls,
waits, each step's calls), without timings.

    python3 scripts/replay-decisions.py build/release/tools/replay/replay > before.txt
    ... change, rebuild ...
    python3 scripts/replay-decisions.py build/release/tools/replay/replay > after.txt
    diff before.txt after.txt        # empty: the same decisions

The segment path's host waits depend on the lag thread's timing, so only its peaks are kept."""
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def decisions(output):
    """The deciding lines of one replay's report."""
    out, section = [], None
    for line in output.splitlines():
        if line.startswith("| streampool"):
            cells = [c.strip() for c in line.split("|")[1:-1]]
            # name | peak live | peak reserved | ratio | ns/event | ns/event | what it did
            keep = cells[:3] if "segments" in cells[0] else cells[:4] + cells[6:7]
            out.append(" | ".join(keep))
        elif line.startswith("streampool (host backend):"):
            section = "vm"
            out.append(line.strip())
        elif line.startswith("streampool (host backend, segments)"):
            section = "segments"
        elif line.startswith("| step") and section == "vm":
            out.append(line.strip())
    return out


def main():
    replay = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "release", "tools",
                                                                 "replay", "replay")
    for trace in sorted(glob.glob(os.path.join(ROOT, "bench", "traces", "*.txt.gz"))):
        for lag in ("0", "4", "32"):
            for mode in ("--per-stream", "--shared"):
                for shelf in ([], ["--large-cache", "0"]):
                    args = [replay, "--backend", "host", "--backend", "host-segments", "--lag", lag,
                            mode, *shelf, trace]
                    run = subprocess.run(args, capture_output=True, text=True, check=True)
                    print(f"# {os.path.basename(trace)} --lag {lag} {mode} {' '.join(shelf)}")
                    print("\n".join(decisions(run.stdout)))


if __name__ == "__main__":
    main()
