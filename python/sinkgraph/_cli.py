"""The `sinkgraph` command of a pip-installed package: the C++ CLI shipped inside it."""

import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    exe = os.path.join(here, "bin", "sinkgraph")
    if not os.path.exists(exe):
        sys.exit(f"sinkgraph: the command-line tool is not in this install ({exe}); "
                 "it ships with `pip install .`")
    os.execv(exe, [exe] + sys.argv[1:])
