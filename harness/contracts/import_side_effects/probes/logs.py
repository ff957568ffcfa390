"""The probes of what a call says and how it configures saying it: log records and logger configuration
(``log-record``, ``logger-config``) and warnings issued or filters changed (``warning``)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, NamedTuple

from harness.contracts.import_side_effects.probes.base import (
    Probe,
    SideEffect,
    contains,
    describe,
    replace_attribute,
    shorten,
)


class _LoggerState(NamedTuple):
    level: int
    handlers: tuple[logging.Handler, ...]
    filters: tuple[object, ...]
    propagate: bool
    disabled: bool


class _HandlerState(NamedTuple):
    level: int
    formatter: object
    filters: tuple[object, ...]


_DEFAULT_LOGGER = _LoggerState(logging.NOTSET, (), (), True, False)


class _LoggingState(NamedTuple):
    loggers: dict[str, _LoggerState]
    handlers: dict[int, tuple[str, logging.Handler, _HandlerState]]
    settings: dict[str, object]

    @classmethod
    def take(cls) -> _LoggingState:
        loggers: dict[str, logging.Logger] = {"root": logging.getLogger()}
        for name, logger in dict(logging.Logger.manager.loggerDict).items():
            if isinstance(logger, logging.Logger):
                loggers[name] = logger
        handlers = {}
        for name, logger in loggers.items():
            for handler in logger.handlers:
                state = _HandlerState(handler.level, handler.formatter, tuple(handler.filters))
                handlers.setdefault(id(handler), (name, handler, state))
        settings = {
            "logging.disable": logging.getLogger().manager.disable,
            "logging.setLoggerClass": logging.getLoggerClass(),
            "logging.setLogRecordFactory": logging.getLogRecordFactory(),
        }
        states = {
            name: _LoggerState(
                logger.level, tuple(logger.handlers), tuple(logger.filters), logger.propagate, logger.disabled
            )
            for name, logger in loggers.items()
        }
        return cls(states, handlers, settings)


class LoggingProbe(Probe):
    """Log records emitted, and loggers, handlers or levels configured: an import that configures logging changes what
    the framework's own logs show."""

    kinds = ("log-record", "logger-config")

    def __init__(self) -> None:
        self._records: list[logging.LogRecord] = []
        self._stack = ExitStack()

    def start(self) -> None:
        self._before = _LoggingState.take()
        records = self._records

        def handle(logger: logging.Logger, record: logging.LogRecord) -> object:
            records.append(record)
            return original(logger, record)

        original = replace_attribute(self._stack, logging.Logger, "handle", handle)

    def stop(self) -> None:
        self._stack.close()
        self._after = _LoggingState.take()

    def effects(self) -> Iterator[SideEffect]:
        for record in self._records:
            try:
                message = record.getMessage()
            except Exception:
                message = str(record.msg)
            yield SideEffect("log-record", record.name, shorten(f"{record.levelname}: {message}"), message)
        yield from self._config_changes()

    def _config_changes(self) -> Iterator[SideEffect]:
        before, after = self._before, self._after
        for name, state in after.loggers.items():
            for change in _logger_changes(before.loggers.get(name, _DEFAULT_LOGGER), state):
                yield SideEffect("logger-config", name, change)
        for name in sorted(before.loggers.keys() - after.loggers.keys()):
            yield SideEffect("logger-config", name, "logger removed from the logging manager")
        for key, (name, handler, state) in after.handlers.items():
            if key in before.handlers and before.handlers[key][1] is handler and before.handlers[key][2] != state:
                old = before.handlers[key][2]
                for field in _HandlerState._fields:
                    if getattr(old, field) != getattr(state, field):
                        yield SideEffect("logger-config", name, f"handler {describe(handler)} {field} changed")
        for setting, value in after.settings.items():
            if before.settings[setting] is not value and before.settings[setting] != value:
                yield SideEffect(
                    "logger-config", setting, f"changed: {describe(before.settings[setting])} -> {describe(value)}"
                )


def _logger_changes(old: _LoggerState, new: _LoggerState) -> Iterator[str]:
    if old.level != new.level:
        yield f"level: {logging.getLevelName(old.level)} -> {logging.getLevelName(new.level)}"
    for field in ("handlers", "filters"):
        old_items, new_items = getattr(old, field), getattr(new, field)
        yield from (f"{field[:-1]} added: {describe(item)}" for item in new_items if not contains(old_items, item))
        yield from (f"{field[:-1]} removed: {describe(item)}" for item in old_items if not contains(new_items, item))
    if old.propagate != new.propagate:
        yield f"propagate: {old.propagate} -> {new.propagate}"
    if old.disabled != new.disabled:
        yield f"disabled: {old.disabled} -> {new.disabled}"


class WarningProbe(Probe):
    """Warnings issued, and changes to the warning filters."""

    kinds = ("warning",)

    def start(self) -> None:
        self._catcher = warnings.catch_warnings(record=True)
        self._log = self._catcher.__enter__()
        warnings.simplefilter("always")
        self._filters = list(warnings.filters)

    def stop(self) -> None:
        self._current = list(warnings.filters)
        self._catcher.__exit__(None, None, None)

    def effects(self) -> Iterator[SideEffect]:
        for message in self._log:
            where = f"{message.filename}:{message.lineno}"
            yield SideEffect("warning", message.category.__name__, shorten(f"{message.message} ({where})"))
        for entry in self._current:
            if entry not in self._filters:
                yield SideEffect("warning", "warnings.filters", f"filter added: {_describe_filter(entry)}")
        for entry in self._filters:
            if entry not in self._current:
                yield SideEffect("warning", "warnings.filters", f"filter removed: {_describe_filter(entry)}")


def _describe_filter(entry: tuple[Any, ...]) -> str:
    action, message, category, module, lineno = entry
    pattern = getattr(message, "pattern", message)
    where = getattr(module, "pattern", module)
    return f"{action} {category.__name__} message={pattern!r} module={where!r} lineno={lineno}"
