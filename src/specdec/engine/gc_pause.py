"""The cyclic garbage collector, paused while an engine is built.

Loading a model allocates a few hundred thousand Python objects that all stay alive
(module trees, tokenizer tables, weight records). Each full collection on the way
rescans every one of them, so collections triggered by the load itself cost a
quarter of an engine's start (0.7 of 2.9 s for the bundled model). Nothing the load
makes is cyclic garbage worth collecting early.

At the end, one full collection moves them all to the oldest generation, where full
collections are rare (one runs only once the objects that survived since the last
outnumber a quarter of it). Left in the youngest, they would be rescanned by the
next young collections, ~0.15 s each, inside the first requests' steps.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """No cyclic collections inside the block; after it, the collector's prior state
    and, where it was on and the block succeeded, one full collection.

    Reference counting still frees everything acyclic. Process-wide, as ``gc`` is:
    engines built in two threads at once re-enable it when the first one to pause it
    is done (the caller that found it disabled never enables it).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
    if was_enabled:
        gc.collect()


def freeze_startup_heap() -> None:
    """Moves every object alive now out of the collector's sight (``gc.freeze``).

    For a process that serves one engine for its whole life (``specdec serve``): a full
    collection while serving then scans only what serving made: 2-4 ms instead of
    ~0.24 s with the bundled model's engine, app and libraries (vLLM's engine core does
    the same). Never for an offline ``LLM``: the user's objects would be frozen with it,
    and never collected once they became garbage.
    """
    gc.freeze()
