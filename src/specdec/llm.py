"""The offline entry point: ``LLM().generate(prompts, params)``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from specdec.config import EngineConfig
from specdec.engine import LLMEngine
from specdec.outputs import RequestOutput
from specdec.sampling_params import SamplingParams

Prompt = str | list[int]
Message = dict[str, Any]
WAKE_UP_TIMEOUT_S = 0.05  # longest idle wait for a blocked request (a plugin may not signal)


class LLM:
    """A paged-KV continuous-batching engine over a local model.

    ``LLM()`` loads the bundled SmolLM2-135M-Instruct; ``LLM(model=PATH)`` a local
    HF directory or a .gguf file. Keyword arguments are :class:`EngineConfig` fields or
    engine options that plugins declare (e.g. ``structured_backend="llguidance"``).
    """

    def __init__(self, model: str | None = None, **config: Any):
        self.engine = LLMEngine(EngineConfig.from_kwargs(model=model, **config))

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        **options: Any,
    ) -> list[RequestOutput]:
        """Generate for one prompt or many; returns outputs in prompt order.

        ``options`` are per-request plugin options (e.g. ``grammar="json.lark"``),
        applied to every prompt; they travel in ``SamplingParams.extra``. Here (not in
        the server) ``grammar`` may also be a path to a Lark file.
        """
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        prompts = list(prompts)
        if not prompts:
            raise ValueError("no prompts given")
        params = self._params_per_prompt(sampling_params, len(prompts), options)
        return self._run(prompts, params, use_tqdm)

    def chat(
        self,
        messages: Sequence[Message] | Sequence[Sequence[Message]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> list[RequestOutput]:
        """Apply the tokenizer's chat template to one conversation or many, then generate."""
        if not messages:
            raise ValueError("no messages given")
        conversations = [messages] if isinstance(messages[0], dict) else list(messages)
        prompts = [
            self.apply_chat_template(c, add_generation_prompt, **(chat_template_kwargs or {}))
            for c in conversations
        ]
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm, **options)

    def apply_chat_template(
        self, conversation: Sequence[Message], add_generation_prompt: bool = True, **kwargs: Any
    ) -> list[int]:
        for m in conversation:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"each message needs 'role' and 'content', got {m!r}")
        if not self.tokenizer.chat_template:
            raise ValueError("this model's tokenizer has no chat template; use generate()")
        ids = self.tokenizer.apply_chat_template(
            list(conversation), add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)

    def stats(self) -> dict[str, Any]:
        return self.engine.stats()

    def _params_per_prompt(self, sampling_params, n: int, options: dict) -> list[SamplingParams]:
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * n
        else:
            params = list(sampling_params)
            if len(params) != n:
                raise ValueError(f"got {len(params)} sampling params for {n} prompts")
        if options:
            params = [replace(p, extra={**p.extra, **options}) for p in params]
        return [_with_grammar_file(p) for p in params]

    def _add_all(self, prompts: list[Prompt], params: list[SamplingParams]) -> list[str]:
        """Admit every prompt, or none: all are checked before any step runs, and the
        error names each inadmissible prompt by index."""
        added: list[str] = []
        refused: list[tuple[int, ValueError]] = []
        try:
            for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
                try:
                    _check_unicode(prompt)
                    added.append(self.engine.add_request(prompt, p).request_id)
                except ValueError as exc:
                    refused.append((i, exc))
        except BaseException:
            self._abort(added)
            raise
        if refused:
            self._abort(added)
            shown = "; ".join(f"prompt {i}: {exc}" for i, exc in refused[:5])
            more = f" (and {len(refused) - 5} more)" if len(refused) > 5 else ""
            raise ValueError(f"{len(refused)} of {len(prompts)} prompts cannot be served, "
                             f"nothing was generated: {shown}{more}") from refused[0][1]
        return added

    def _abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.engine.abort(rid)

    def _run(self, prompts: list[Prompt], params: list[SamplingParams], use_tqdm: bool):
        engine = self.engine
        added = self._add_all(prompts, params)
        results: dict[str, RequestOutput] = {}
        bar = None
        if use_tqdm and len(prompts) > 1:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(prompts), desc="generate", unit="req")
        work_ready = engine.context.work_ready
        try:
            pending = set(added)
            while pending:
                work_ready.clear()  # before the step: a wake-up during it is not lost
                outputs = engine.step()
                if not outputs and _all_blocked(engine.requests.values()):
                    # every request waits on a plugin (e.g. a compiling grammar): sleep
                    # until one is unblocked; the timeout covers plugins that never signal
                    work_ready.wait(WAKE_UP_TIMEOUT_S)
                for out in outputs:
                    if out.finished and out.request_id in pending:
                        pending.discard(out.request_id)
                        results[out.request_id] = out
                        if bar is not None:
                            bar.update(1)
                if pending and not engine.has_unfinished():
                    raise RuntimeError(f"engine lost requests {sorted(pending)}")
        except BaseException:
            for rid in added:
                if rid not in results:
                    engine.abort(rid)
            raise
        finally:
            if bar is not None:
                bar.close()
        return [results[rid] for rid in added]


def _all_blocked(requests) -> bool:
    """Every unfinished request is held back by a plugin (``request.blocked_reason``)."""
    return all(r.blocked_reason for r in requests if not r.is_finished)


def _check_unicode(prompt: Prompt) -> None:
    if isinstance(prompt, str):
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"prompt contains a lone surrogate at character {exc.start}; "
                             "pass valid Unicode text") from None


def _with_grammar_file(params: SamplingParams) -> SamplingParams:
    """A ``grammar`` option naming a file is read here: the engine reads no paths."""
    grammar = params.extra.get("grammar")
    if not isinstance(grammar, str):
        return params
    from specdec.structured.spec import read_grammar_path

    text = read_grammar_path(grammar)
    return params if text is grammar else replace(params, extra={**params.extra, "grammar": text})
