"""The byte vocabulary must spell every token exactly as the tokenizer decodes it."""

from __future__ import annotations

import pickle

from specdec.structured.vocabulary import TokenVocabulary, token_vocabulary


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


class _FillsCacheWhenPickled(bytes):
    """A token whose pickling fills one of the vocabulary's cached properties, as another
    thread (the start-up walks) does while a compile pickles the vocabulary for its child."""

    vocab: TokenVocabulary | None = None

    def __reduce__(self):
        if self.vocab is not None:
            self.vocab.max_token_bytes  # noqa: B018 - adds an entry to the instance dict
        return bytes, (bytes(self),)


def test_vocabulary_pickles_while_its_caches_fill():
    token = _FillsCacheWhenPickled(b"ab")
    vocab = TokenVocabulary([token, b"c", None], frozenset([2]), 3)
    token.vocab = vocab
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy.token_bytes == [b"ab", b"c", None]
    assert copy.fingerprint == vocab.fingerprint and copy.max_token_bytes == 2
