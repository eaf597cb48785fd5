"""Start measuring once the engine's start-up work elsewhere is done.

An engine starts the compile forkserver, whose preload runs ~2 s in another process;
meanwhile the engine's steps run on one thread (core/cpu_share.py), so a figure taken
right after ``LLM()`` would time that, not the engine. Its KV cache's pages are faulted
in beside it, in idle time; a step writing a page not yet in faults it in itself.
"""

from __future__ import annotations


def settled(llm, timeout_s: float = 60.0):
    """``llm``, once the compile forkserver is ready and its KV cache's pages are in
    (``core/kv_prefault.py``), or ``timeout_s`` has passed for each."""
    from specdec.structured.compile import isolation_ready

    isolation_ready(timeout_s)
    prefault = getattr(llm.engine.runner, "kv_prefault", None)
    if prefault is not None:
        prefault.wait(timeout_s)
    return llm
