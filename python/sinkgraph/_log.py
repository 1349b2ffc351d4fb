"""The Python side's log lines, through the C++ logger's level (SINKGRAPH_LOG)."""

import sys

from . import _C

_LEVELS = {"error": 0, "warn": 1, "info": 2, "debug": 3}


def _enabled(level):
    return _LEVELS[_C.log_level()] >= _LEVELS[level]


def info(msg):
    if _enabled("info"):
        print(f"sinkgraph: info: {msg}", file=sys.stderr, flush=True)


def warn(msg):
    if _enabled("warn"):
        print(f"sinkgraph: warning: {msg}", file=sys.stderr, flush=True)
