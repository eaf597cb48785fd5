"""Model registry: HF ``architectures`` name -> model factory. Open to plugins."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

ModelFactory = Callable[[object], nn.Module]


class UnsupportedArchitectureError(ValueError):
    """The checkpoint's architecture has no registered implementation."""


class ModelRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, ModelFactory] = {}

    def register(self, architecture: str, factory: ModelFactory) -> None:
        self._factories[architecture] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def resolve(self, config) -> ModelFactory:
        archs = list(getattr(config, "architectures", None) or [])
        for arch in archs:
            if arch in self._factories:
                return self._factories[arch]
        raise UnsupportedArchitectureError(
            f"unsupported architecture {archs or '(none in config.json)'}; "
            f"supported: {', '.join(self.names())}"
        )


def register_builtin_models(registry: ModelRegistry) -> None:
    from specdec.model import llama

    registry.register("LlamaForCausalLM", llama.LlamaForCausalLM)
    registry.register("MistralForCausalLM", llama.MistralForCausalLM)
    registry.register("Qwen2ForCausalLM", llama.Qwen2ForCausalLM)
