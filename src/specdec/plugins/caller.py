"""Calling plugins one implementation at a time: pluggy's order, each its own arguments.

The engine never calls ``pm.hook.<name>(...)``: there, one raising implementation stops
the ones after it and cannot be named. :class:`HookCaller` walks the implementations in
the order pluggy calls them, hands each only the arguments it declares, and wraps a
failure in :class:`PluginError` naming the plugin and the hook. What a failure costs
(one request, a report, engine start-up) is the hook's contract in ``hookspecs.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import torch

    from specdec.core.request import Request
    from specdec.sample.logits_rows import LogitsRow

    Fail = Callable[[Request, "PluginError"], None]  # fails one request with the error

log = logging.getLogger("specdec.plugins")


class PluginError(RuntimeError):
    """A plugin's hook implementation raised; ``error`` is what it raised."""

    def __init__(self, plugin: str, hook: str, error: Exception):
        super().__init__(f"plugin {plugin!r} failed in {hook}: {type(error).__name__}: {error}")
        self.plugin = plugin
        self.hook = hook
        self.error = error


class HookCaller:
    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm
        self.errors: dict[str, str] = {}  # plugin name -> last failure reported only here
        self.num_errors = 0  # failures reported only here (no request carried them)
        for caller in pm.hook.__dict__.values():
            for impl in caller.get_hookimpls():
                if impl.wrapper or impl.hookwrapper:
                    raise ValueError(
                        f"plugin {self.name(impl)!r}: {caller.name} is a hook wrapper; specdec "
                        "calls each implementation on its own to isolate failures, so hook "
                        "wrappers are not supported"
                    )

    def name(self, impl: pluggy.HookImpl) -> str:
        return self.pm.get_name(impl.plugin) or repr(impl.plugin)

    def impls(self, hook: str) -> list[pluggy.HookImpl]:
        """Pluggy's call order: tryfirst first, trylast last, else the newest registered first.

        ``get_hookimpls()`` lists them the other way round; pluggy's ``_multicall``
        walks it reversed.
        """
        return getattr(self.pm.hook, hook).get_hookimpls()[::-1]

    def call(self, impl: pluggy.HookImpl, hook: str, kwargs: dict[str, Any]) -> Any:
        """Call one implementation with the arguments it declares; a raise becomes PluginError."""
        args = [kwargs[name] for name in impl.argnames]
        try:
            if not impl.kwargnames:
                return impl.function(*args)
            # parameters with defaults: passed when the hook has them, as pluggy does
            return impl.function(*args, **{k: kwargs[k] for k in impl.kwargnames if k in kwargs})
        except Exception as exc:  # noqa: BLE001 - attributed to the plugin, handled by the caller
            raise PluginError(self.name(impl), hook, exc) from exc

    def each(self, hook: str, **kwargs: Any) -> list[Any]:
        """Every implementation in order; the non-None results. The first failure stops it."""
        results = []
        for impl in self.impls(hook):
            result = self.call(impl, hook, kwargs)
            if result is not None:
                results.append(result)
        return results

    def every(self, hook: str, **kwargs: Any) -> tuple[list[Any], list[PluginError]]:
        """Every implementation, even after one fails: the non-None results and the failures."""
        results, failures = [], []
        for impl in self.impls(hook):
            try:
                result = self.call(impl, hook, kwargs)
            except PluginError as err:
                failures.append(err)
                continue
            if result is not None:
                results.append(result)
        return results, failures

    def report(self, err: PluginError) -> None:
        """A failure no request carries: log it, keep it for ``stats()`` under the plugin."""
        self.num_errors += 1
        self.errors[err.plugin] = str(err)
        log.warning("%s", err, exc_info=err.error)

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {"plugin_errors": self.num_errors}
        stats.update((f"plugin_error_{name}", msg) for name, msg in self.errors.items())
        return stats

    def per_request(self, hook: str, requests: list[Request],
                    kwargs: Callable[[list[Request]], dict[str, Any]], fail: Fail) -> None:
        """A batch hook, isolated per request.

        Each implementation gets ``kwargs(batch)`` for the live requests; if it raises,
        it is called again one request at a time and fails only the requests it raises
        on. If it raises on none of them alone, the failure is reported and the batch
        goes on. Then the next implementation, without the failed requests.
        """
        for impl in self.impls(hook):
            live = [r for r in requests if not r.is_finished]
            if not live:
                return
            try:
                self.call(impl, hook, kwargs(live))
                continue
            except PluginError as batch_err:
                err = batch_err
            failed = False
            for req in live:
                try:
                    self.call(impl, hook, kwargs([req]))
                except PluginError as req_err:
                    fail(req, req_err)
                    failed = True
            if not failed:
                self.report(err)

    def logits(self, logits: torch.Tensor, rows: list[LogitsRow],
               restore: Callable[[], torch.Tensor], fail: Fail) -> None:
        """``specdec_logits``, isolated per request.

        On a failure the logits are restored (``restore()`` recomputes them) and every
        implementation runs again on each request's rows alone; a request whose rows
        make one raise fails (its rows keep whatever was written; the engine drops them).
        """
        hook = "specdec_logits"
        impls = self.impls(hook)
        try:
            for impl in impls:
                self.call(impl, hook, {"logits": logits, "rows": rows})
            return
        except PluginError:
            logits.copy_(restore())  # undo partial edits, then find the culprit
        for req in dict.fromkeys(r.request for r in rows):
            idx = [i for i, r in enumerate(rows) if r.request is req]
            sub = logits[idx]
            try:
                for impl in impls:
                    self.call(impl, hook, {"logits": sub, "rows": [rows[i] for i in idx]})
            except PluginError as err:
                fail(req, err)
            logits[idx] = sub
