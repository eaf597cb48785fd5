"""OpenAI-compatible HTTP server over the engine (``specdec serve``).

Layout, one concept per module:

- :mod:`~specdec.server.app` — the FastAPI app factory and the info routes
  (``/health``, ``/v1/models``, ``/metrics``, ``/stats``);
- :mod:`~specdec.server.async_engine` — the engine thread; pausing and aborting requests
  whose readers stall; :mod:`~specdec.server.request_stream` — a request's delta buffer;
- :mod:`~specdec.server.prompts` — chat templates and tokenization in worker threads,
  with :mod:`~specdec.server.template_sandbox` for trusted client templates;
- :mod:`~specdec.server.options` (limits), :mod:`~specdec.server.body_limit` (413),
  :mod:`~specdec.server.validation` (whole-body checks);
- :mod:`~specdec.server.completions`, :mod:`~specdec.server.chat` — the two endpoints;
- :mod:`~specdec.server.streaming` — admission, waiting, SSE, disconnect -> abort;
- :mod:`~specdec.server.protocol` — request bodies; :mod:`~specdec.server.sampling` and
  :mod:`~specdec.server.structured_outputs` turn them into ``SamplingParams``;
- :mod:`~specdec.server.errors`, :mod:`~specdec.server.auth`,
  :mod:`~specdec.server.metrics`, :mod:`~specdec.server.serve` (the CLI command).
"""

from __future__ import annotations

__all__ = ["create_app"]


def __getattr__(name: str):
    # Lazy, so ``specdec --help`` and ``specdec generate`` do not import FastAPI.
    if name == "create_app":
        from specdec.server.app import create_app

        return create_app
    raise AttributeError(name)
