"""The server's own limits and trust switches (``specdec serve`` flags), validated once."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 2**20


@dataclass(frozen=True, slots=True)
class ServerOptions:
    max_request_bytes: int = 8 * MIB  # larger bodies get a 413 before they are parsed
    trust_request_chat_template: bool = False  # allow a client's own Jinja chat template
    template_timeout_s: float = 5.0  # time limit for rendering a chat template
    prompt_workers: int = 2  # threads that tokenize prompts and render chat templates
    stream_stall_timeout_s: float = 30.0  # a paused request (client not reading) is aborted
    stream_buffer_outputs: int = 16  # undelivered outputs per request before it is paused

    def __post_init__(self) -> None:
        if self.max_request_bytes < 1024:
            raise ValueError(f"max_request_bytes must be >= 1024, got {self.max_request_bytes}")
        for name in ("template_timeout_s", "stream_stall_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("prompt_workers", "stream_buffer_outputs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
