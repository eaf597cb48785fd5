"""Incremental detokenization and stop-string detection.

Text is emitted as the difference between decoding a short window of tokens with
and without the newest ones, and held back while it ends in U+FFFD, i.e. while a
multi-byte UTF-8 character is split across byte-level BPE tokens. Decoding both
strings from the same window start keeps tokenizers that strip a leading space
(SentencePiece) consistent.
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

    def add_tokens(self, new_token_ids: list[int]) -> str:
        """Append tokens; return the newly readable text (after stop-string trimming)."""
        if self.stopped_by is not None:
            return ""
        self.token_ids.extend(new_token_ids)
        prefix = self._decode(self.prefix_offset, self.read_offset)
        full = self._decode(self.prefix_offset, len(self.token_ids))
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.token_ids)
        return self._append(full[len(prefix) :])

    def flush(self) -> str:
        """At the end: emit whatever is still held back (e.g. a dangling partial char)."""
        if self.stopped_by is not None or self.read_offset == len(self.token_ids):
            return ""
        prefix = self._decode(self.prefix_offset, self.read_offset)
        full = self._decode(self.prefix_offset, len(self.token_ids))
        self.read_offset = len(self.token_ids)
        return self._append(full[len(prefix) :])

    def _append(self, delta: str) -> str:
        old_len = len(self.text)
        self.text += delta
        if self.stop:
            self._check_stop(old_len)
        return self.text[old_len:] if len(self.text) > old_len else ""

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
            self.text = self.text[: at + len(s)] if self.include_stop_str_in_output else self.text[:at]
            self.stopped_by = s

    def _decode(self, start: int, end: int) -> str:
        if start >= end:
            return ""
        return self.tokenizer.decode(
            self.token_ids[start:end], skip_special_tokens=self.skip_special_tokens
        )
