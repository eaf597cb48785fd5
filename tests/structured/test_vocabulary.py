"""The byte vocabulary must spell every token exactly as the tokenizer decodes it."""

from __future__ import annotations

from specdec.structured.vocabulary import token_vocabulary


def test_token_bytes_concatenate_to_the_text(tokenizer):
    vocab = token_vocabulary(tokenizer, 49152, frozenset([2]))
    for text in ['{"a": "Zoë"}', "Ġ literal\n\ttabs", "日本語 😀 café", 'quote " back \\ slash']:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert b"".join(vocab.token_bytes[i] for i in ids) == text.encode()


def test_special_tokens_have_no_bytes_and_eos_is_kept_apart(tokenizer):
    vocab = token_vocabulary(tokenizer, 49152, frozenset([2]))
    assert vocab.token_bytes[2] is None and vocab.eos_token_ids == {2}
    for i in tokenizer.all_special_ids:
        assert vocab.token_bytes[i] is None


def test_partial_utf8_tokens_exist_and_are_raw_bytes(tokenizer):
    vocab = token_vocabulary(tokenizer, 49152, frozenset([2]))
    partial = [b for b in vocab.token_bytes if b and _is_partial_utf8(b)]
    assert partial, "a byte-level BPE vocabulary has tokens that split characters"


def _is_partial_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True
