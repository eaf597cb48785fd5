"""Incremental detokenization and stop-string detection.

Text is emitted as the difference between decoding a short window of tokens with
and without the newest ones, and held back while it ends in U+FFFD, i.e. while a
multi-byte UTF-8 character is split across byte-level BPE tokens. Decoding both
strings from the same window start keeps tokenizers that strip a leading space
(SentencePiece) consistent.

For streaming, the last ``len(longest stop string) - 1`` characters are held back
until the request ends, so text that a stop string later trims is never emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IncrementalDetokenizer:
    tokenizer: object
    stop: list[str] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    prefix_offset: int = 0
    read_offset: int = 0
    stopped_by: str | None = None  # the stop string that ended the text
    emitted: int = 0  # characters of ``text`` already handed out as deltas

    def __post_init__(self) -> None:
        # A fast tokenizer's Rust backend decodes the same text without the Python
        # wrapper (about half of the per-token cost), unless the wrapper post-processes.
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        cleans = getattr(self.tokenizer, "clean_up_tokenization_spaces", False)
        self._backend = backend if backend is not None and not cleans else None

    @property
    def holdback(self) -> int:
        return max((len(s) for s in self.stop), default=1) - 1

    @property
    def emitted_text(self) -> str:
        return self.text[: self.emitted]

    def add_tokens(self, new_token_ids: list[int]) -> str:
        """Append tokens; return the text now safe to emit (a stop string ends it)."""
        if self.stopped_by is None:
            self.token_ids.extend(new_token_ids)
            prefix = self._decode(self.prefix_offset, self.read_offset)
            full = self._decode(self.prefix_offset, len(self.token_ids))
            if len(full) > len(prefix) and not full.endswith("\ufffd"):
                self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
                self._append(full[len(prefix) :])
        return self._take(final=self.stopped_by is not None)

    def flush(self) -> str:
        """At the end: decode what is left (e.g. a dangling partial char), emit all."""
        if self.stopped_by is None and self.read_offset < len(self.token_ids):
            prefix = self._decode(self.prefix_offset, self.read_offset)
            full = self._decode(self.prefix_offset, len(self.token_ids))
            self.read_offset = len(self.token_ids)
            self._append(full[len(prefix) :])
        return self._take(final=True)

    def _take(self, final: bool) -> str:
        end = len(self.text) if final else max(self.emitted, len(self.text) - self.holdback)
        delta, self.emitted = self.text[self.emitted : end], end
        return delta

    def _append(self, delta: str) -> None:
        old_len = len(self.text)
        self.text += delta
        if self.stop:
            self._check_stop(old_len)

    def _check_stop(self, old_len: int) -> None:
        longest = max(len(s) for s in self.stop)
        search_from = max(0, old_len - longest + 1)
        best: tuple[int, str] | None = None
        for s in self.stop:
            at = self.text.find(s, search_from)
            if at != -1 and (best is None or at < best[0]):
                best = (at, s)
        if best is not None:
            at, s = best
            end = at + len(s) if self.include_stop_str_in_output else at
            self.text = self.text[:end]
            self.stopped_by = s

    def _decode(self, start: int, end: int) -> str:
        if start >= end:
            return ""
        if self._backend is not None:
            return self._backend.decode(
                self.token_ids[start:end], skip_special_tokens=self.skip_special_tokens
            )
        return self.tokenizer.decode(
            self.token_ids[start:end], skip_special_tokens=self.skip_special_tokens
        )
