#!/usr/bin/env python3
"""Checks replay's progress line (tools/replay/progress.hpp): none when stderr is not a terminal,
a line per replay when it is.

    check_progress.py REPLAY TRACE

First with stderr a pipe: stderr must hold no carriage return and no progress line at all. Then
with stderr a pseudo-terminal (Python's pty module): each replay must show its first line (0
events done, written at once) and its last (every event done, with a rate), and clear it. Nothing
here depends on timing: those two lines are written however fast the replay runs. Python 3
standard library only.
"""

import os
import pty
import re
import subprocess
import sys
import tempfile

BACKENDS = {"host": "streampool (host backend)", "exact": "exact fit (reference)"}


def commas(n):
    return f"{n:,}"


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    replay, trace = sys.argv[1], sys.argv[2]
    cmd = [replay]
    for b in BACKENDS:
        cmd += ["--backend", b]
    cmd.append(trace)
    ok = True

    # Not a terminal: nothing on stderr.
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, timeout=240, check=False)
    out, err = run.stdout.decode(), run.stderr.decode()
    if run.returncode == 77:
        print(out)
        return 77
    if run.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {run.returncode}\n{out}\n{err}")
        return 1
    match = re.search(r"(\d+) events replayed", out)
    if not match:
        print(f"FAIL: no event count in the output:\n{out}")
        return 1
    events = int(match.group(1))
    if "\r" in err or "events/s" in err or "\r" in out:
        print(f"FAIL: progress written though stderr is not a terminal: {err!r}")
        ok = False
    else:
        print("stderr a pipe: no progress written, as it must be")

    # A terminal: the first and the last line of each replay, then the line cleared.
    master, slave = pty.openpty()
    with tempfile.TemporaryFile() as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            seen += chunk
        os.close(master)
        rc = proc.wait(timeout=240)
    text = seen.decode(errors="replace")
    if rc != 0:
        print(f"FAIL: under a terminal the replay exited {rc}:\n{text!r}")
        return 1
    for name in BACKENDS.values():
        first = f"\rreplay: {name}: 0 / {commas(events)} events"
        last = re.compile(re.escape(f"\rreplay: {name}: {commas(events)} / {commas(events)} "
                                    "events, ") + r"[0-9.]+ [Mk]? ?events/s")
        if first not in text:
            print(f"FAIL: no first progress line {first!r} in {text!r}")
            ok = False
        if not last.search(text):
            print(f"FAIL: no last progress line for {name} in {text!r}")
            ok = False
    if not text.endswith("\r\x1b[K"):
        print(f"FAIL: the progress line is not cleared at the end: {text[-80:]!r}")
        ok = False
    if ok:
        lines = [line for line in text.split("\r") if "events" in line]
        print(f"stderr a terminal: {len(lines)} progress lines, last: {lines[-1].strip()!r}")
    print("check_progress: " + ("ok" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
