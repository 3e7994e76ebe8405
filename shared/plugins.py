"""Loading user plugins named by a ``module:attr`` spec (``REACTQ_TOOLS``, ``REACTQ_HOOKS``).

A spec is a comma-separated list of entries ``package.module:attr``; ``attr`` may be
dotted (``mod:holder.tools``). Each entry resolves to an object which, when it is a
zero-argument callable (a factory), is called once. What the object may be is up to the
caller (:func:`reactq.shared.tools.loader.load_tools`, :func:`reactq.shared.hooks.loader.load_hooks`);
this module only imports, calls, and turns every failure into a
:class:`~reactq.shared.errors.ConfigError` that names the setting, the entry and the reason.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import TypeVar, cast

from reactq.shared.errors import ConfigError

__all__ = ["entry_error", "import_entry", "load_entries", "split_spec"]

T = TypeVar("T")


def split_spec(spec: str | Iterable[str] | None) -> list[str]:
    """``"a:b, c:d,"`` → ``["a:b", "c:d"]`` (blank entries dropped)."""
    if spec is None:
        return []
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    return [p.strip() for p in parts if p.strip()]


def entry_error(setting: str, entry: str, reason: str) -> ConfigError:
    """The one error format: ``REACTQ_TOOLS entry 'm:x': <reason>``."""
    return ConfigError(f"{setting} entry '{entry}': {reason}")


def import_entry(entry: str, *, setting: str) -> object:
    """Import ``module:attr`` and return the attribute (not yet called)."""
    module_name, sep, attr_path = entry.partition(":")
    module_name, attr_path = module_name.strip(), attr_path.strip()
    if not sep or not module_name or not attr_path or ":" in attr_path:
        raise entry_error(setting, entry, "expected 'module:attr', e.g. 'mypkg.tools:TOOLS'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise entry_error(setting, entry, f"cannot import module '{module_name}': {exc}") from exc
    except Exception as exc:  # the user's module raised while importing
        raise entry_error(
            setting, entry, f"importing module '{module_name}' raised {type(exc).__name__}: {exc}"
        ) from exc
    obj: object = module
    walked = module_name
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise entry_error(setting, entry, f"'{walked}' has no attribute '{part}'")
        obj = getattr(obj, part)
        walked = f"{walked}.{part}"
    return obj


def _call_factory(obj: Callable[..., object], *, setting: str, entry: str) -> object:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        required = [
            p.name
            for p in sig.parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        if required:
            raise entry_error(
                setting, entry,
                f"is a callable that needs arguments {required}; point at a zero-argument "
                f"factory or at the object itself",
            )
    try:
        result = obj()
    except Exception as exc:
        raise entry_error(setting, entry, f"calling it raised {type(exc).__name__}: {exc}") from exc
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()  # avoid "coroutine was never awaited"
        raise entry_error(setting, entry, "returned an awaitable; factories must be synchronous")
    return result


def load_entries(
    spec: str | Iterable[str] | None,
    *,
    setting: str,
    item_type: type[T],
    container_types: tuple[type[Iterable[T]], ...] = (),
) -> list[tuple[str, list[T]]]:
    """Resolve every entry of ``spec`` to a list of ``item_type`` objects.

    An entry's attribute may be an ``item_type``, a list or tuple of them, one of
    ``container_types`` (iterated), or a zero-argument callable returning one of those
    (called once). Returns ``(entry, items)`` pairs in spec order.
    """
    out: list[tuple[str, list[T]]] = []
    for entry in split_spec(spec):
        obj = import_entry(entry, setting=setting)
        found = _as_list(obj, item_type, container_types)
        if found is None and callable(obj) and not inspect.isclass(obj):
            obj = _call_factory(obj, setting=setting, entry=entry)
            found = _as_list(obj, item_type, container_types)
        if found is None:
            kinds = [item_type.__name__, f"a list of {item_type.__name__}s"]
            kinds += [c.__name__ for c in container_types]
            raise entry_error(
                setting, entry,
                f"is of type {type(obj).__name__}; expected {', '.join(kinds)}, "
                f"or a zero-argument callable returning one",
            )
        items: list[T] = []
        for i, item in enumerate(found):
            if not isinstance(item, item_type):
                raise entry_error(
                    setting, entry,
                    f"item {i} is of type {type(item).__name__}, not {item_type.__name__}",
                )
            items.append(item)
        out.append((entry, items))
    return out


def _as_list(
    obj: object, item_type: type, container_types: tuple[type, ...]
) -> list[object] | None:
    """``[obj]`` for one item, the elements of a list/tuple/container, else ``None``."""
    if isinstance(obj, item_type):
        return [obj]
    if isinstance(obj, list | tuple) or (container_types and isinstance(obj, container_types)):
        return list(cast(Iterable[object], obj))
    return None
