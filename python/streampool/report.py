"""The memory picture of a snapshot (docs/memory-picture.md): one self-contained HTML page, inline
SVG, no script, no network, with the block map of every range and the fragmentation summary.

    python -m streampool.report SNAPSHOT.json -o OUT.html [--title TEXT]

SNAPSHOT.json is what ``Pool.snapshot()`` returns, saved with ``json.dump``, or
``Pool.snapshot_json()``'s text (docs/snapshot.schema.json). The page is drawn by the library
(``sp_snapshot_html`` in libstreampool_report), the same code as ``replay --html``'s.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from typing import Any, Optional, Union

from ._capi import report_lib as _report_lib
from ._errors import _check

__all__ = ["html", "write_html", "main"]


def html(snapshot: Union[dict[str, Any], str, bytes], title: Optional[str] = None) -> str:
    """The page for ``snapshot``: a dict from Pool.snapshot(), or its JSON text."""
    if isinstance(snapshot, dict):
        text = json.dumps(snapshot, separators=(",", ":"), ensure_ascii=False).encode()
    elif isinstance(snapshot, str):
        text = snapshot.encode()
    elif isinstance(snapshot, bytes):
        text = snapshot
    else:
        raise TypeError(f"streampool.report.html: snapshot is {type(snapshot).__name__}, not a "
                        "dict or JSON text")
    out, n = ctypes.c_void_p(), ctypes.c_size_t()
    _check(_report_lib().sp_snapshot_html(text, len(text), title.encode() if title else None,
                                          ctypes.byref(out), ctypes.byref(n)))
    return ctypes.string_at(out.value, n.value).decode() if out.value else ""


def write_html(snapshot: Union[dict[str, Any], str, bytes], path: str,
               title: Optional[str] = None) -> None:
    """Writes html(snapshot, title) to ``path``."""
    page = html(snapshot, title)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m streampool.report",
                                 description="Draws a streampool snapshot as one HTML page.")
    ap.add_argument("snapshot", help="the snapshot's JSON (Pool.snapshot(), json.dump'ed)")
    ap.add_argument("-o", "--output", required=True, help="the HTML file to write")
    ap.add_argument("--title", default=None, help="the page's heading")
    args = ap.parse_args(argv)
    try:
        with open(args.snapshot, "rb") as f:
            text = f.read()
        write_html(text, args.output, args.title)
    except (OSError, ValueError) as e:
        print(f"streampool.report: {e}", file=sys.stderr)
        return 1
    print(f"streampool.report: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
