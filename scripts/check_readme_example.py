#!/usr/bin/env python3
"""Fails when README.md's C++ example differs from examples/quickstart.cpp (which is built and run)."""
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent
readme = (root / "README.md").read_text()
code = (root / "examples" / "quickstart.cpp").read_text()
if "```cpp\n" + code + "```" not in readme:
    sys.exit("README.md's C++ example is not examples/quickstart.cpp verbatim: copy it over")
print("README example matches examples/quickstart.cpp")
