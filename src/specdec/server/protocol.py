"""Request bodies of the OpenAI API (the fields specdec honours), as pydantic models.

Unknown fields are kept (``extra="allow"``) and later either passed to a plugin that
claims them as a request option (``engine.request_options``) or refused with a 400, so
a misspelt constraint never silently yields unconstrained output. The vLLM extensions
(``top_k``, ``min_p``, ``structured_outputs``, ``guided_*``...) are declared here too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class StreamOptions(BaseModel):
    include_usage: bool = False


class StructuredOutputs(BaseModel):
    """vLLM's ``structured_outputs`` extra body field: exactly one constraint."""

    model_config = ConfigDict(extra="forbid")
    json_: Any = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    whitespace_pattern: str | None = None


class SamplingFields(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    response_format: dict[str, Any] | None = None
    # vLLM extensions
    top_k: int | None = None
    min_p: float | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputs | None = None
    guided_json: Any = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None

    @property
    def plugin_fields(self) -> dict[str, Any]:
        """Body fields not declared above: candidates for plugin request options."""
        return dict(self.model_extra or {})


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message text; content parts of type ``text`` are concatenated."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        texts = []
        for part in self.content:
            if part.get("type") != "text":
                raise ValueError(f"content part type {part.get('type')!r} is not supported "
                                 "(text only)")
            texts.append(str(part.get("text", "")))
        return "".join(texts)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    add_generation_prompt: bool = True
    chat_template: str | None = None  # refused unless --trust-request-chat-template
    chat_template_kwargs: dict[str, Any] | None = None
