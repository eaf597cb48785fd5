"""Plugin manager: built-ins, ``specdec`` entry points and plugin objects, one registry."""

from __future__ import annotations

from collections.abc import Sequence

import pluggy

from specdec import hookspecs

ENTRY_POINT_GROUP = "specdec"


class UnknownPluginError(ValueError):
    """A plugin named by the user is neither built in nor installed."""


def builtin_plugins() -> dict[str, object]:
    from specdec.plugins import builtin_models
    from specdec.plugins.prefix_caching import PrefixCachingPlugin
    from specdec.plugins.speculative import SpeculativePlugin
    from specdec.structured.plugin import StructuredOutputPlugin

    return {"builtin_models": builtin_models, "prefix_caching": PrefixCachingPlugin(),
            "structured": StructuredOutputPlugin(), "speculative": SpeculativePlugin()}


def make_plugin_manager(
    plugins: Sequence[object | str] = (),
    disable: Sequence[str] = (),
    load_entry_points: bool = True,
) -> pluggy.PluginManager:
    """Register built-ins, then installed entry points, then ``plugins``.

    A string in ``plugins`` names a plugin that must be available (built in or
    installed), so a typo is an error rather than a silently missing feature.
    ``disable`` blocks plugins by name.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for name in disable:
        pm.set_blocked(name)
    for name, plugin in builtin_plugins().items():
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    if load_entry_points:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in plugins:
        if isinstance(plugin, str):
            if pm.get_plugin(plugin) is None:
                available = ", ".join(sorted(n for n, _ in pm.list_name_plugin() if n))
                raise UnknownPluginError(
                    f"unknown plugin {plugin!r}; available: {available or '(none)'}"
                )
            continue
        if not pm.is_registered(plugin):
            pm.register(plugin, name=_unique_name(pm, plugin))
    return pm


def _unique_name(pm: pluggy.PluginManager, plugin: object) -> str:
    base = getattr(plugin, "name", None) or getattr(plugin, "__name__", None)
    base = base if isinstance(base, str) else type(plugin).__name__
    name, n = base, 1
    while pm.get_plugin(name) is not None or pm.is_blocked(name):
        n += 1
        name = f"{base}-{n}"
    return name


def plugin_name(pm: pluggy.PluginManager, impl) -> str:
    return pm.get_name(impl.plugin) or repr(impl.plugin)
