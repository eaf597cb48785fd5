"""Content keys of full KV blocks: a hash chain over the token prefix.

Block ``i`` of a request holds tokens ``[i * B, (i + 1) * B)`` (``B`` = block size).
Its KV depends on *every* token before it, so its key chains the parent's key::

    key_0 = sha256(None,  tokens[0:B],  extra_keys)
    key_1 = sha256(key_0, tokens[B:2B], extra_keys)
    key_i = sha256(key_{i-1}, tokens[iB:(i+1)B], extra_keys)

Two requests whose first ``i + 1`` blocks hold the same tokens (and the same extra
keys, e.g. the same ``cache_salt``) get the same ``key_i`` and may share the block.
A cryptographic hash keeps crafted prompts from colliding on purpose (Python's
``hash()`` is easy to collide); the :class:`BlockHash` also keeps the block's token
ids, parent key and extra keys so a hit re-checks them exactly.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specdec.core.request import Request

CACHE_SALT = "cache_salt"  # per-request option: requests share KV only with the same salt


@dataclass(frozen=True, slots=True)
class BlockHash:
    """The identity of one full block's content, as stored on ``KVBlock.block_hash``.

    Equality compares every field, so ``stored == wanted`` is the collision-safe
    re-check of a hit: same digest *and* same tokens, parent and extra keys.
    """

    digest: bytes  # sha256 of (parent digest, token ids, extra keys); the index key
    parent: bytes | None  # the previous block's digest; None for a request's first block
    token_ids: tuple[int, ...]  # the block_size tokens the block holds
    extra_keys: tuple[Any, ...]  # whatever else the KV depends on (cache salt, ...)


def hash_block(
    parent: BlockHash | None, token_ids: Sequence[int], extra_keys: tuple[Any, ...] = ()
) -> BlockHash:
    """Key of a full block whose predecessor has key ``parent`` (None: first block)."""
    parent_digest = None if parent is None else parent.digest
    tokens = tuple(token_ids)
    payload = pickle.dumps((parent_digest, tokens, extra_keys), protocol=pickle.HIGHEST_PROTOCOL)
    return BlockHash(hashlib.sha256(payload).digest(), parent_digest, tokens, extra_keys)


def extra_keys_of(request: Request) -> tuple[Any, ...]:
    """What besides the tokens decides a request's KV: today only its cache salt."""
    salt = request.sampling_params.extra.get(CACHE_SALT)
    return () if salt is None else ((CACHE_SALT, salt),)


def hash_request_blocks(
    request: Request, block_size: int, num_tokens: int, known: list[BlockHash]
) -> list[BlockHash]:
    """Extend ``known`` (the request's first block keys, in place) to cover every
    full block within its first ``num_tokens`` verified tokens; returns ``known``.

    Only prompt and output tokens count: draft tokens are never hashed.
    """
    num_full = min(num_tokens, request.num_tokens) // block_size
    if len(known) >= num_full:
        return known
    extra = extra_keys_of(request)
    prompt, output = request.prompt_token_ids, request.output_token_ids
    n_prompt = len(prompt)
    parent = known[-1] if known else None
    for i in range(len(known), num_full):
        start, end = i * block_size, (i + 1) * block_size
        if end <= n_prompt:
            tokens = prompt[start:end]
        else:
            tokens = prompt[start:end] + output[max(0, start - n_prompt) : end - n_prompt]
        parent = hash_block(parent, tokens, extra)
        known.append(parent)
    return known
