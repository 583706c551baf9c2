"""Typed tasks: a handler's parameters after the ``Job``, read once into a :class:`Signature`.

A typed handler's payload is its arguments: a JSON object by parameter name. The signature
turns a call (``task.enqueue(welcome, template="x")``) or a payload into that JSON, refusing
what does not fit with :class:`~workerpool.model.errors.InvalidArguments` before anything is
written; and, when the job runs, the JSON back into the annotated types (defaults applied for
what the payload lacks), refusing a payload that no longer fits (a deploy changed the
signature) with :class:`~workerpool.model.errors.ArgumentsRefused`, a ``Permanent``: the job
goes dead with the reason instead of being retried into the same wall.

The checking and converting is msgspec's (``convert`` and ``to_builtins``: dataclasses,
TypedDicts, attrs classes, enums, ``datetime``/``date``/``UUID``/``Decimal``, lists, dicts,
optionals and unions of them), and pydantic's ``TypeAdapter`` for a parameter whose type is
(or holds) a pydantic model, when pydantic is installed (docs/typed-tasks.md says why).
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import msgspec

from .errors import ArgumentsRefused, ConfigError, InvalidArguments

_EMPTY = inspect.Parameter.empty
#: Return annotations whose values are stored as they are (nothing to convert either way).
_AS_IS = (_EMPTY, None, type(None), Any, object)


def _identity(value: Any) -> Any:
    return value


class Converter(NamedTuple):
    """One annotated type: ``load`` a JSON value into it, ``dump`` a value of it to JSON."""

    load: Callable[[Any], Any]
    dump: Callable[[Any], Any]


#: Anything goes (no annotation, ``Any``): the JSON value as it is.
AS_IS = Converter(_identity, _identity)


class Argument(NamedTuple):
    name: str
    #: ``inspect.Parameter.empty`` for a required argument.
    default: Any
    converter: Converter
    #: How the signature shows it (``welcome: Welcome``), for errors and the dashboard.
    shown: str


def converter(tp: Any, where: str) -> Converter:
    """The converter of annotation ``tp``; ConfigError naming ``where`` if no library can
    convert it."""
    if tp in _AS_IS:
        return AS_IS
    if _is_pydantic(tp):
        return _pydantic_converter(tp)
    try:
        info = msgspec.inspect.type_info(tp)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if isinstance(info, msgspec.inspect.CustomType):
        raise ConfigError(
            f"{where}: type {_name(tp)} cannot be converted to and from JSON (use a dataclass,"
            " TypedDict, attrs class, pydantic model, enum, datetime, date, UUID, Decimal,"
            " or lists, dicts and optionals of them)"
        )
    return Converter(lambda value: msgspec.convert(value, tp), msgspec.to_builtins)


def _is_pydantic(tp: Any) -> bool:
    """Whether ``tp`` is, or holds, a pydantic model (only if pydantic is imported: an
    application that uses its models has imported it)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None:
        return False
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return True
    return any(_is_pydantic(arg) for arg in typing.get_args(tp))


def _pydantic_converter(tp: Any) -> Converter:
    from pydantic import TypeAdapter

    adapter = TypeAdapter(tp)
    # validated first: pydantic serialises a dict given for a model only with a warning
    return Converter(
        adapter.validate_python,
        lambda value: adapter.dump_python(adapter.validate_python(value), mode="json"),
    )


def _name(tp: Any) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


def _shown(parameter: inspect.Parameter, tp: Any, module: str) -> str:
    text = (
        parameter.name
        if tp is _EMPTY
        else f"{parameter.name}: {inspect.formatannotation(tp, base_module=module)}"
    )
    if parameter.default is not _EMPTY:
        text += f" = {parameter.default!r}"
    return text


class Signature:
    """A handler's typed parameters and return type, read from its signature.

    ``typed``: the handler takes parameters after the ``Job`` (its payload is their
    arguments); a handler that takes only the ``Job`` keeps its dict. ``result``: the converter
    of its return annotation (None: its result is stored and given back as it is). Annotations
    are resolved when the task is declared, or on first use when one names a class defined
    later in its module.
    """

    def __init__(self, task: str, fn: Callable[..., Any]) -> None:
        self.task, self.fn = task, fn
        parameters = list(inspect.signature(fn).parameters.values())
        self.typed = len(parameters) > 1
        self._parameters = parameters[1:]
        for parameter in self._parameters:
            if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
                raise ConfigError(
                    f"task {task}: parameter {parameter.name!r} must be named (a typed task's"
                    " arguments are a JSON object by parameter name: no *args, **kwargs or"
                    " positional-only parameters after the job)"
                )
        self._bind = inspect.Signature(self._parameters).bind
        self._arguments: dict[str, Argument] | None = None
        self._result: Converter | None = None
        try:
            self._resolve()
        except NameError:  # a class defined later in the handler's module: on first use
            pass

    # -- reading the annotations ---------------------------------------------------------------

    @property
    def arguments(self) -> dict[str, Argument]:
        if self._arguments is None:
            self._resolve_late()
        return self._arguments  # type: ignore[return-value]

    @property
    def result(self) -> Converter | None:
        if self._arguments is None:
            self._resolve_late()
        return self._result

    def _resolve_late(self) -> None:
        """Resolve on first use; a name that is still not defined is a ConfigError."""
        try:
            self._resolve()
        except NameError as exc:
            raise ConfigError(f"task {self.task}: cannot read its annotations: {exc}") from None

    def _resolve(self) -> None:
        hints = self._hints()
        arguments = {}
        for parameter in self._parameters:
            tp = hints.get(parameter.name, _EMPTY)
            where = f"task {self.task}: parameter {parameter.name!r}"
            arguments[parameter.name] = Argument(
                parameter.name,
                parameter.default,
                converter(tp, where),
                _shown(parameter, tp, self.fn.__module__),
            )
        self._result = self._result_converter(hints.get("return", _EMPTY))
        self._arguments = arguments

    def _result_converter(self, returns: Any) -> Converter | None:
        if returns in _AS_IS:
            return None
        try:
            return converter(returns, f"task {self.task}: its return annotation")
        except ConfigError:
            if self.typed:
                raise
            return None  # a dict task keeps what it had: its result stored as it is

    def _hints(self) -> dict[str, Any]:
        try:
            return typing.get_type_hints(self.fn, include_extras=False)
        except NameError:
            if self.typed:
                raise
            return {}  # a dict task's return annotation it cannot read: its result as it is

    def shown(self) -> str:
        """The parameters after the job, as declared: ``(welcome: Welcome, template: str)``."""
        return "(" + ", ".join(a.shown for a in self.arguments.values()) + ")"

    # -- at enqueue ----------------------------------------------------------------------------

    def payload(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON payload of a call to the task (``task.enqueue(*args, **kwargs)``), not yet
        checked (:meth:`check` does it once, on every path). InvalidArguments for a call that
        does not bind (a missing, unknown or repeated argument)."""
        try:
            bound = self._bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"task {self.task}{self.shown()}: {exc}") from None
        return bound.arguments

    def check(self, payload: Any) -> Any:
        """``payload`` (a mapping of arguments by name, values JSON or of their annotated
        types) as the JSON to store; InvalidArguments naming the first argument that does not
        fit. Anything but a mapping is given back for the payload check to refuse."""
        if not isinstance(payload, Mapping):
            return payload
        arguments = self.arguments
        unknown = [name for name in payload if name not in arguments]
        if unknown:
            raise InvalidArguments(
                f"task {self.task}{self.shown()}: unexpected argument {unknown[0]!r}"
            )
        stored = {}
        for argument in arguments.values():
            if argument.name in payload:
                stored[argument.name] = self._checked(argument, payload[argument.name])
            elif argument.default is _EMPTY:
                raise InvalidArguments(
                    f"task {self.task}{self.shown()}: missing argument {argument.name!r}"
                )
        return stored

    def _checked(self, argument: Argument, value: Any) -> Any:
        """``value`` as JSON, proved to load back into the argument's type."""
        try:
            text = argument.converter.dump(value)
            argument.converter.load(text)
        except Exception as exc:  # msgspec's, pydantic's and a dump's TypeError alike
            raise InvalidArguments(
                f"task {self.task}: argument {argument.name!r}: {_reason(exc, argument.name)}"
            ) from None
        return text

    # -- when the job runs ---------------------------------------------------------------------

    def load(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The handler's keyword arguments from a stored payload (upcast already); defaults
        fill what it lacks. ArgumentsRefused (permanent) when it does not fit."""
        try:
            arguments = self.arguments
        except ConfigError as exc:
            raise ArgumentsRefused(str(exc)) from None
        unknown = [name for name in payload if name not in arguments]
        if unknown:
            raise ArgumentsRefused(
                f"task {self.task}{self.shown()}: the payload has argument {unknown[0]!r},"
                " which the handler no longer takes (an upcaster can reshape old payloads)"
            )
        loaded = {}
        for argument in arguments.values():
            if argument.name not in payload:
                if argument.default is _EMPTY:
                    raise ArgumentsRefused(
                        f"task {self.task}{self.shown()}: the payload lacks argument"
                        f" {argument.name!r}"
                    )
                continue
            try:
                loaded[argument.name] = argument.converter.load(payload[argument.name])
            except Exception as exc:
                raise ArgumentsRefused(
                    f"task {self.task}: argument {argument.name!r}: {_reason(exc, argument.name)}"
                ) from None
        return loaded

    def call(self, job: Any) -> Any:
        """Run the handler on ``job``: its arguments loaded from the payload, its result dumped
        to JSON (an ``async def`` handler's once awaited)."""
        result = self.fn(job, **self.load(job.payload)) if self.typed else self.fn(job)
        if self.result is None:
            return result
        if inspect.isawaitable(result):
            return self._dumped(result)
        return self.result.dump(result)

    async def _dumped(self, awaitable: Any) -> Any:
        value = await awaitable
        return self.result.dump(value)  # type: ignore[union-attr]

    def load_result(self, value: Any) -> Any:
        """A stored result rebuilt into the return annotation."""
        return value if self.result is None else self.result.load(value)


def _reason(exc: BaseException, name: str) -> str:
    """A library's validation message on one line, its paths rooted at the argument."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and "pydantic" in type(exc).__module__:
        first = errors()[0]
        where = ".".join(str(part) for part in (name, *first["loc"]))
        return f"{first['msg']} - at `{where}`"
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__).replace("`$", f"`{name}")


def named_arguments(signature: Signature | None, payload: Any) -> dict[str, Any] | None:
    """A typed job's payload as its arguments by name, for an operator (``workerpool job
    show``, the dashboard): ``{"signature": "send_welcome(welcome: Welcome, ...)",
    "arguments": [{"name", "value", "source"}]}`` where ``source`` is ``given``, ``default``
    (applied when it runs), ``missing`` or ``unexpected`` (the last two: it will go dead).
    None for a dict task, or a payload that is no object."""
    if signature is None or not signature.typed or not isinstance(payload, Mapping):
        return None
    try:
        arguments = signature.arguments
    except ConfigError:
        return None
    shown = []
    for argument in arguments.values():
        if argument.name in payload:
            shown.append(_row(argument.name, payload[argument.name], "given"))
        elif argument.default is _EMPTY:
            shown.append(_row(argument.name, None, "missing"))
        else:
            shown.append(_row(argument.name, _default(argument), "default"))
    shown += [
        _row(name, value, "unexpected") for name, value in payload.items() if name not in arguments
    ]
    return {"signature": f"{signature.task}{signature.shown()}", "arguments": shown}


def _row(name: str, value: Any, source: str) -> dict[str, Any]:
    return {"name": name, "value": value, "source": source}


def _default(argument: Argument) -> Any:
    try:
        return argument.converter.dump(argument.default)
    except Exception:  # a default only Python can show
        return repr(argument.default)
