#!/usr/bin/env python3
"""Checks that the charts of a memory-picture page (docs/memory-picture.md) render in a browser.

    check_page_renders.py PAGE.html [--min-charts N] [--out DIR]

For each <svg id=... width=... height=...> of the page, a copy of the page gets a style sheet that
hides everything but that chart and pins it at the top left corner (CSS only: the page has no
script, and the check adds none). Headless Chromium takes a screenshot of a window the chart's
size, and the chart passes when enough of its pixels are coloured (not white, not grey) in at
least two distinct hues: an empty chart, a chart of only a frame, axes and text, or a chart of one
flat colour fails.

Before the page, the check runs on pages broken on purpose (a chart of only a frame and text, a
chart of one colour, a chart that is not drawn at all) and each must fail: a check that cannot
fail proves nothing.

Needs Chromium (Debian: chromium) and PIL (python3-pil). Without them it exits 77 (CTest: skipped),
except when CI=true or STREAMPOOL_REQUIRE_CHROMIUM is 1/ON, where a skip would hide a page that
no longer renders: then it fails. Python 3 standard library otherwise.
"""

import argparse
import colorsys
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77

# A chart passes with at least this share of coloured pixels, in at least MIN_HUES hues that each
# cover HUE_SHARE of the chart. The GPT-2 page's charts are 10% to 60% coloured.
MIN_COLOURED = 0.02
MIN_HUES = 2
HUE_SHARE = 0.002


def required():
    flag = os.environ.get("STREAMPOOL_REQUIRE_CHROMIUM", "").strip().lower()
    return os.environ.get("CI") == "true" or flag in ("1", "on", "true", "yes")


def find_chromium():
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def charts(html):
    """(id, width, height) of every <svg> of the page that has all three."""
    found = []
    for tag in re.findall(r"<svg\b[^>]*>", html):
        attrs = dict(re.findall(r'\s([a-zA-Z-]+)="([^"]*)"', tag))
        if {"id", "width", "height"} <= attrs.keys():
            found.append((attrs["id"], int(float(attrs["width"])), int(float(attrs["height"]))))
    return found


def isolate(html, chart_id):
    """The page with a style sheet that shows chart_id alone, at (0, 0)."""
    css = (
        "<style>html, body { margin: 0 !important; padding: 0 !important; "
        "background: #fff !important; overflow: hidden !important; }\n"
        "body * { visibility: hidden !important; }\n"
        f"#{chart_id}, #{chart_id} * {{ visibility: visible !important; }}\n"
        f"#{chart_id} {{ position: fixed !important; left: 0 !important; top: 0 !important; "
        "margin: 0 !important; z-index: 2147483647 !important; }</style>\n"
    )
    at = html.find("</head>")
    return html[:at] + css + html[at:] if at >= 0 else css + html


def screenshot(chromium, page, png, width, height, work):
    cmd = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        "--force-device-scale-factor=1", "--no-first-run", "--disable-extensions",
        f"--user-data-dir={os.path.join(work, 'profile')}",
        f"--screenshot={png}", f"--window-size={width},{height}",
        "file://" + os.path.abspath(page),
    ]
    try:
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=90,
                             check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"chromium took more than 90 s on {page}") from None
    if not os.path.exists(png):
        out = run.stdout.decode(errors="replace")[-2000:]
        raise RuntimeError(f"chromium wrote no screenshot (exit {run.returncode}):\n{out}")


def judge(png, width, height):
    """(passed, what was seen) for the screenshot of one chart of width x height px."""
    from PIL import Image  # checked in main()

    with Image.open(png) as im:
        box = im.convert("RGB").crop((0, 0, min(width, im.width), min(height, im.height)))
        pixels = list(box.getdata())
    total = len(pixels)
    coloured = 0
    hues = {}
    for r, g, b in pixels:
        # Coloured: far enough from grey (text, axes, frames and the white background are grey).
        if max(r, g, b) - min(r, g, b) < 40:
            continue
        coloured += 1
        h, _, _ = colorsys.rgb_to_hsv(r / 255, g / 255, b / 255)
        sector = int(h * 12) % 12
        hues[sector] = hues.get(sector, 0) + 1
    big = sorted((n for n in hues.values() if n >= HUE_SHARE * total), reverse=True)
    seen = (f"{coloured / total:.1%} of {total} pixels coloured, {len(big)} hue(s) over "
            f"{HUE_SHARE:.1%} each")
    return coloured >= MIN_COLOURED * total and len(big) >= MIN_HUES, seen


def check_page(chromium, page, work, out_dir=None):
    """[(chart id, passed, what was seen)] for every chart of the page."""
    with open(page, encoding="utf-8") as f:
        html = f.read()
    results = []
    for chart_id, width, height in charts(html):
        single = os.path.join(work, f"{chart_id}.html")
        with open(single, "w", encoding="utf-8") as f:
            f.write(isolate(html, chart_id))
        png = os.path.join(out_dir or work, f"{chart_id}.png")
        if os.path.exists(png):
            os.remove(png)
        screenshot(chromium, single, png, width, height, work)
        passed, seen = judge(png, width, height)
        results.append((chart_id, passed, seen))
    return results


BROKEN = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>broken</title></head><body>
<p>Charts broken on purpose: each must fail the check.</p>
<svg xmlns="http://www.w3.org/2000/svg" id="frame-only" width="600" height="200">
<rect x="0.5" y="0.5" width="599" height="199" fill="none" stroke="#444"/>
<line x1="40" y1="180" x2="580" y2="180" stroke="#888"/>
<text x="40" y="20" font-size="14">a title, axes and a frame, but no data</text></svg>
<svg xmlns="http://www.w3.org/2000/svg" id="one-colour" width="600" height="200">
<rect x="0" y="0" width="600" height="200" fill="#2b5d9b"/></svg>
<svg xmlns="http://www.w3.org/2000/svg" id="not-drawn" width="600" height="200"
 style="display:none"><rect x="0" y="0" width="300" height="200" fill="#2b5d9b"/>
<rect x="300" y="0" width="300" height="200" fill="#63b158"/></svg>
</body></html>
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("page")
    parser.add_argument("--min-charts", type=int, default=2,
                        help="fail when the page has fewer charts (default 2)")
    parser.add_argument("--out", help="keep each chart's screenshot here (CHART_ID.png)")
    args = parser.parse_args()

    missing = []
    chromium = find_chromium()
    if chromium is None:
        missing.append("chromium (Debian: chromium)")
    try:
        import PIL  # noqa: F401
    except ImportError:
        missing.append(f"PIL for {sys.executable} (Debian: python3-pil)")
    if missing:
        what = "missing " + " and ".join(missing)
        if required():
            print(f"check_page_renders: FAIL: {what}, and CI=true or STREAMPOOL_REQUIRE_CHROMIUM "
                  "asks for this test")
            return 1
        print(f"check_page_renders: skipped: {what}")
        return SKIP

    if not os.path.exists(args.page):
        print(f"check_page_renders: FAIL: {args.page} does not exist")
        return 1
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    ok = True
    with tempfile.TemporaryDirectory(prefix="streampool-render-") as work:
        # The check must be able to fail.
        broken = os.path.join(work, "broken.html")
        with open(broken, "w", encoding="utf-8") as f:
            f.write(BROKEN)
        for chart_id, passed, seen in check_page(chromium, broken, work):
            verdict = "FAIL: passed, but it is broken" if passed else "failed, as it must"
            print(f"broken chart {chart_id}: {seen}: {verdict}")
            ok = ok and not passed

        results = check_page(chromium, args.page, work, args.out)
        for chart_id, passed, seen in results:
            print(f"chart {chart_id}: {seen}: {'ok' if passed else 'FAIL'}")
            ok = ok and passed
        if len(results) < args.min_charts:
            print(f"check_page_renders: FAIL: {len(results)} charts in {args.page}, "
                  f"expected at least {args.min_charts}")
            ok = False
    print(f"check_page_renders: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
