"""fill_bitmask writes the mask into the right row of whichever bitmask it is given."""

from __future__ import annotations

import numpy as np
import torch

from specdec.structured import allocate_token_bitmask


def test_fill_bitmask_follows_the_bitmask_it_is_given(json_grammar, tokenizer):
    matcher = json_grammar.matcher()
    first = allocate_token_bitmask(3, 49152)
    second = allocate_token_bitmask(2, 49152)
    wide = torch.full((1, 1600), -1, dtype=torch.int32)  # more words than the vocabulary's
    for step, token in enumerate(tokenizer.encode('{"a": [1, "x"]}', add_special_tokens=False)):
        mask = matcher.allowed_mask()
        row = step % 3
        matcher.fill_bitmask(first, row)
        matcher.fill_bitmask(second, step % 2)
        matcher.fill_bitmask(wide, 0)
        assert np.array_equal(first[row].numpy(), mask)
        assert np.array_equal(second[step % 2].numpy(), mask)
        assert np.array_equal(wide[0, :1536].numpy(), mask) and not wide[0, 1536:].any()
        assert matcher.accept_token(token)
