"""Start measuring once the engine's start-up work elsewhere is done.

An engine starts the compile forkserver, whose preload runs ~2 s in another process;
meanwhile the engine's steps run on one thread (core/cpu_share.py), so a figure taken
right after ``LLM()`` would time that, not the engine.
"""

from __future__ import annotations


def settled(llm, timeout_s: float = 60.0):
    """``llm``, once the compile forkserver is ready (or ``timeout_s`` has passed)."""
    from specdec.structured.compile import isolation_ready

    isolation_ready(timeout_s)
    return llm
