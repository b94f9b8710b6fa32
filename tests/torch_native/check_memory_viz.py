#!/usr/bin/env python3
"""Checks that pages of torch.cuda._memory_viz (a snapshot of the native allocator drawn by
PyTorch's own viewer) render in headless Chromium, offline.

    check_memory_viz.py --memory-viz MemoryViz.js [--d3 d3.min.js] [--out DIR] PAGE.html...

A page that `_memory_viz.segment_plot` or `trace_plot` writes imports PyTorch's viewer,
torch/utils/viz/MemoryViz.js, from a CDN, and the viewer imports d3 5 from another. Neither is in
torch's wheel, and the machines that run this have no network: give the viewer's file (from
PyTorch's source at the version in use) with --memory-viz, and d3 5's browser bundle with --d3
(Debian: node-d3, the default path). Each page is served from a scratch folder over local HTTP,
with the viewer imported from there and its d3 imports bound to the bundle; nothing else of the
page or the viewer changes.

A page passes when Chromium, after the viewer ran, shows at least --min-shapes SVG rectangles or
polygons (the segments, blocks or allocations drawn from the snapshot) and its screenshot is
coloured in at least two hues, by tests/report/check_page_renders.py's measure. Before the pages,
a page whose snapshot holds nothing is checked, and must fail: a check that cannot fail proves
nothing. Exit 0 when every page passes, 1 otherwise.

Made for issue 44's check "_memory_viz renders the snapshot" (docs/torch.md): the pages come from
tests/torch_native/gpu_smoke.py on the GPU machine (STREAMPOOL_VIZ_OUT), the check runs here.
"""

import argparse
import base64
import functools
import http.server
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "report"))
import check_page_renders  # noqa: E402  (judge, find_chromium: one measure of "coloured")

VIEWER_URL = re.compile(r'"https://[^"]*/torch/utils/viz/MemoryViz\.js"')
D3_IMPORT = re.compile(
    r'import (\* as (\w+)|\{([^}]*)\}) from "https://cdn\.skypack\.dev/d3[^"]*";')
WIDTH, HEIGHT = 1400, 900


def viewer_offline(source):
    """MemoryViz.js with its d3 imports bound to the global of d3's browser bundle."""
    def bind(m):
        names = m.group(2) or f"{{{m.group(3)}}}"
        return f"const {names} = window.d3;"

    out, n = D3_IMPORT.subn(bind, source)
    if n == 0 or re.search(r'^import .* from "https?://', out, re.M):
        raise RuntimeError("MemoryViz.js: its d3 imports are not the ones this check knows")
    return out


def page_offline(html):
    """The page with the viewer imported from the scratch folder and d3 loaded before it."""
    out, n = VIEWER_URL.subn('"./MemoryViz.js"', html)
    if n != 1:
        raise RuntimeError("the page does not import MemoryViz.js as _memory_viz's pages do")
    script = '<script src="d3.min.js"></script>\n'
    at = out.find("</head>")
    return out[:at] + script + out[at:] if at >= 0 else script + out


def empty_page(template_page):
    """A page like `template_page` whose snapshot has no segment and no event."""
    snapshot = {"segments": [], "device_traces": [[]]}
    buffer = pickle.dumps(snapshot)
    buffer += b"\x00" * (3 - len(buffer) % 3)
    files = json.dumps([{"name": "snapshot.pickle",
                         "base64": base64.b64encode(buffer).decode()}])
    return re.sub(r"const local_files = .*\n", lambda _: f"const local_files = {files}\n",
                  template_page, count=1)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the verdicts are the output
        pass


def serve(folder):
    handler = functools.partial(QuietHandler, directory=folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def chromium_run(chromium, url, work, *what):
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--force-device-scale-factor=1", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={os.path.join(work, 'profile')}", "--virtual-time-budget=15000",
           f"--window-size={WIDTH},{HEIGHT}", *what, url]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                          check=False)


def check(chromium, folder, name, html, png, min_shapes):
    """(passed, what was seen) for one page served from `folder`."""
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        f.write(html)
    server = serve(folder)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{name}"
        dom = chromium_run(chromium, url, folder, "--dump-dom").stdout.decode(errors="replace")
        if os.path.exists(png):
            os.remove(png)
        shot = chromium_run(chromium, url, folder, f"--screenshot={png}")
    finally:
        server.shutdown()
    svg = "".join(re.findall(r"<svg\b.*?</svg>", dom, re.S))
    shapes = len(re.findall(r"<(?:rect|polygon)\b", svg))
    if not os.path.exists(png):
        return False, f"no screenshot (exit {shot.returncode}): {shot.stderr.decode()[-500:]}"
    coloured, seen = check_page_renders.judge(png, WIDTH, HEIGHT)
    return shapes >= min_shapes and coloured, f"{shapes} SVG shapes; {seen}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="+")
    parser.add_argument("--memory-viz", required=True, help="PyTorch's MemoryViz.js")
    parser.add_argument("--d3", default="/usr/share/nodejs/d3/dist/d3.min.js",
                        help="d3 5's browser bundle (default: Debian's node-d3)")
    parser.add_argument("--min-shapes", type=int, default=4)
    parser.add_argument("--out", help="keep each page's screenshot here (PAGE.png)")
    args = parser.parse_args()
    chromium = check_page_renders.find_chromium()
    if chromium is None or not os.path.exists(args.d3):
        print("check_memory_viz: FAIL: needs chromium and d3 5 (Debian: chromium, node-d3)")
        return 1
    with open(args.memory_viz, encoding="utf-8") as f:
        viewer = viewer_offline(f.read())
    out = args.out or tempfile.mkdtemp(prefix="streampool-viz-out-")
    os.makedirs(out, exist_ok=True)
    ok = True
    with tempfile.TemporaryDirectory(prefix="streampool-viz-") as folder:
        with open(os.path.join(folder, "MemoryViz.js"), "w", encoding="utf-8") as f:
            f.write(viewer)
        shutil.copy(args.d3, os.path.join(folder, "d3.min.js"))
        pages = []
        for page in args.pages:
            with open(page, encoding="utf-8") as f:
                pages.append((os.path.basename(page), page_offline(f.read())))
        passed, seen = check(chromium, folder, "empty.html", empty_page(pages[0][1]),
                             os.path.join(out, "empty.png"), args.min_shapes)
        print(f"a snapshot with nothing in it: {seen}: "
              f"{'FAIL: passed, but there is nothing to draw' if passed else 'failed, as it must'}")
        ok = not passed
        for name, html in pages:
            png = os.path.join(out, os.path.splitext(name)[0] + ".png")
            passed, seen = check(chromium, folder, name, html, png, args.min_shapes)
            print(f"{name}: {seen}: {'ok' if passed else 'FAIL'} ({png})")
            ok = ok and passed
    print(f"check_memory_viz: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
