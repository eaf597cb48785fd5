"""The byte string each token id stands for, the alphabet every grammar backend works in.

Byte-level BPE tokenizers (GPT-2, SmolLM2, Llama 3) store tokens as printable stand-ins
for bytes: ``Ġ`` is byte 0x20 (a space), ``Ã©`` the two UTF-8 bytes of ``é``, and a single
token may hold half of a multi-byte character. Grammars, however, are written over
text. Working in bytes settles both: a token is allowed when its *bytes* extend a valid
prefix, so a character split across two tokens is handled like any other prefix.

SentencePiece vocabularies (``▁`` for a space, ``<0x0A>`` byte-fallback tokens) are
mapped the same way. Special tokens (``<|im_end|>``...) get no bytes: a grammar can never
produce them; EOS is handled separately (allowed exactly when the text is complete).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property

from specdec.structured.byte_trie import ByteTrie, build_byte_trie

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def gpt2_unicode_to_bytes() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode``: printable stand-in char -> byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


@dataclass
class TokenVocabulary:
    """``token_bytes[i]`` is token ``i``'s bytes, or None for tokens a grammar never emits."""

    token_bytes: list[bytes | None]
    eos_token_ids: frozenset[int]
    vocab_size: int  # width of the logits rows; ids past the tokenizer are never allowed
    _fingerprint: str = field(default="", repr=False)

    @property
    def fingerprint(self) -> str:
        """A hash of the byte vocabulary and EOS ids: part of every compile-cache key."""
        if not self._fingerprint:
            h = hashlib.blake2b(digest_size=16)
            h.update(repr((sorted(self.eos_token_ids), self.vocab_size)).encode())
            for b in self.token_bytes:
                h.update(b"\x00" if b is None else len(b).to_bytes(2, "little") + b)
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    @cached_property
    def byte_trie(self) -> ByteTrie:
        """The tokens' bytes as a trie (see :mod:`specdec.structured.byte_trie`)."""
        return build_byte_trie(self.token_bytes, self.vocab_size)

    @cached_property
    def max_token_bytes(self) -> int:
        """The longest token in bytes (bounds how far one token can move a parser)."""
        return max((len(b) for b in self.token_bytes if b), default=0)

    def __getstate__(self) -> dict:
        """What a compile child needs, read field by field: other threads fill the cached
        properties meanwhile (pickling ``__dict__`` itself raced them: "dictionary changed
        size during iteration")."""
        state = {"token_bytes": self.token_bytes, "eos_token_ids": self.eos_token_ids,
                 "vocab_size": self.vocab_size, "_fingerprint": self.fingerprint}
        trie = self.__dict__.get("byte_trie")
        if trie is not None:  # sent built (3 MB, ~3 ms): rebuilding costs ~120 ms
            state["byte_trie"] = trie
        return state

    def bytes_to_ids(self) -> dict[bytes, list[int]]:
        """Bytes -> every token id with those bytes (the shape outlines-core wants)."""
        out: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.token_bytes):
            if b:
                out.setdefault(b, []).append(i)
        return out


def token_vocabulary(tokenizer, vocab_size: int | None = None,
                     eos_token_ids: frozenset[int] | None = None) -> TokenVocabulary:
    """Build (and memoise on the tokenizer object) the byte vocabulary of an HF tokenizer."""
    key = (vocab_size, eos_token_ids)
    cache = tokenizer.__dict__.setdefault("_specdec_token_vocabulary", {})
    if key not in cache:
        cache[key] = _build(tokenizer, vocab_size, eos_token_ids)
    return cache[key]


def _build(tokenizer, vocab_size, eos_token_ids) -> TokenVocabulary:
    eos = frozenset(eos_token_ids or ())
    if not eos and tokenizer.eos_token_id is not None:
        eos = frozenset([tokenizer.eos_token_id])
    n = len(tokenizer)
    vocab_size = max(vocab_size or n, n)
    special = set(getattr(tokenizer, "all_special_ids", ()))
    added = {i: t for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    special |= {i for i, t in added.items() if getattr(t, "special", False)}
    decode_piece = _piece_decoder(tokenizer)
    pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
    token_bytes: list[bytes | None] = [None] * vocab_size
    for i, piece in enumerate(pieces):
        if i in special or piece is None or i in eos:
            continue
        if i in added:
            token_bytes[i] = str(added[i]).encode() or None
        else:
            token_bytes[i] = decode_piece(piece)
    return TokenVocabulary(token_bytes, eos, vocab_size)


def _piece_decoder(tokenizer):
    """Pick how a vocabulary piece turns into bytes: byte-level, SentencePiece or plain."""
    kind = _decoder_kind(tokenizer)
    if kind == "byte_level":
        table = gpt2_unicode_to_bytes()

        def byte_level(piece: str) -> bytes | None:
            try:
                return bytes(table[c] for c in piece)
            except KeyError:  # not a byte-level piece (should not happen): keep its text
                return piece.encode()

        return byte_level

    def sentencepiece(piece: str) -> bytes | None:
        m = _BYTE_FALLBACK.match(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        return piece.replace("▁", " ").encode()

    return sentencepiece


def _decoder_kind(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        decoder = json.dumps(spec.get("decoder") or {})
        if '"ByteLevel"' in decoder:
            return "byte_level"
    return "sentencepiece"
