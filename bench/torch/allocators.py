"""The allocators that bench/torch/workload.py runs and bench/torch/run.py compares, with the name
each has in run.py's tables: one list for both scripts, which import it from their own folder.

Besides PyTorch's three allocators, streampool's variants: the default (the native allocator), the
same with granules not made exportable (what sharing between processes costs), with 16 or 32 MiB
granules of virtual memory instead of 8 (what the granule costs or saves), the plug-in path, and the
floor plug-in (bench/torch/floor_plugin.cpp: what PyTorch's pluggable path costs by itself).
"""

NAMES = {"native": "PyTorch native", "async": "cudaMallocAsync", "expandable": "expandable segments",
         "streampool": "streampool", "streampool-noipc": "streampool, not exportable",
         "streampool-plugin": "streampool plug-in", "streampool-g16": "streampool, 16 MiB granules",
         "streampool-g32": "streampool, 32 MiB granules", "floor": "floor plug-in"}
