"""Built-in plugin: automatic prefix caching (on unless ``enable_prefix_caching=False``).

Requests that start with the same tokens (a shared system prompt, few-shot
examples, the earlier turns of a chat) reuse the KV blocks computed for the first
of them instead of recomputing them; the cache logic lives in
:mod:`specdec.core.prefix_cache`, this module only wires it into the engine.

Per-request option ``cache_salt`` (any string): requests share cached KV only with
requests carrying the same salt, so tenants that must not observe each other's
prompts (e.g. through time-to-first-token) can be kept apart::

    llm.generate(prompt, params, cache_salt="tenant-42")

Stats added to ``LLM.stats()``: ``prefix_cache_queries`` / ``prefix_cache_hits``
(prompt tokens at first admission), ``prefix_cache_hit_rate``,
``prefix_cache_readmission_hits``, ``prefix_cache_evictions``, ``prefix_cache_blocks``.
"""

from __future__ import annotations

from typing import Any

from specdec.core.block_hash import CACHE_SALT
from specdec.core.prefix_cache import HashChainPrefixCache
from specdec.core.request import Request
from specdec.engine_context import EngineContext
from specdec.hookspecs import hookimpl


class PrefixCachingPlugin:
    """One instance per engine (built-ins are instantiated per plugin manager)."""

    def __init__(self) -> None:
        self.cache: HashChainPrefixCache | None = None

    @hookimpl
    def specdec_engine_started(self, context: EngineContext) -> None:
        if not context.config.enable_prefix_caching:
            return
        kv = context.kv_cache_manager
        self.cache = HashChainPrefixCache(kv.pool, kv.block_size)
        kv.prefix_cache = self.cache

    @hookimpl
    def specdec_request_options(self) -> list[str]:
        return [CACHE_SALT]

    @hookimpl
    def specdec_request_added(self, request: Request) -> None:
        salt = request.sampling_params.extra.get(CACHE_SALT)
        if salt is not None and (not isinstance(salt, str) or not salt):
            raise ValueError(f"{CACHE_SALT} must be a non-empty string, got {salt!r}")

    @hookimpl
    def specdec_stats(self) -> dict[str, Any]:
        if self.cache is None:
            return {}
        return self.cache.stats.as_dict(self.cache.num_cached_blocks)
