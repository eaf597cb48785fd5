"""Token-level masks for Lark grammars: a byte-level contextual lexer plus an LALR parser.

Read in this order: ``byte_dfa`` (a terminal's regex as a DFA over bytes), ``lexer``
(all terminals a parser state accepts, combined into one DFA), ``lalr`` (the parse
table on immutable stacks), ``token_walk`` (the whole vocabulary pushed through a lexer
DFA at once), ``prewalk`` (the walks done at compile time), ``grammar`` (compiled grammar,
masks, and the matcher).
"""
