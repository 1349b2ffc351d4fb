"""ATen -> sinkgraph IR converters, one registry, one file per op family.

``registry`` holds the registry and the helpers converters share; each family
module registers its converters on import: ``elementwise``, ``shape``,
``linalg``, ``norm``, ``conv``, ``attention``, ``indexing``, ``symbolic`` (the
size arithmetic of dynamic shapes). AOTAutograd hands the backend functional
graphs (in-place calls rewritten), so converters are written for functional
overloads; the one write left is ``copy_`` into a graph input (a mutated
buffer or input), at the end of the graph. How to add an operator:
docs/architecture.md, "The PyTorch front end".
"""

from . import attention, conv, elementwise, indexing, linalg, norm, shape, symbolic  # noqa: F401
from .registry import Copies, Unsupported, capability, lookup, registered, sg_op

__all__ = ["Copies", "Unsupported", "capability", "lookup", "registered", "sg_op"]
