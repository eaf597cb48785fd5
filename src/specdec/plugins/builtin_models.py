"""Built-in plugin: registers the Llama-family models."""

from specdec.hookspecs import hookimpl
from specdec.model.registry import register_builtin_models


@hookimpl
def specdec_register_models(registry):
    register_builtin_models(registry)
