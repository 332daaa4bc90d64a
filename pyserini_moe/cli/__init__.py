"""What every ``python -m pyserini_moe.*`` command shares: user errors become one line, exit 2."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import signal
import sys
import threading
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pyserini_moe.errors import (
    Terminated,
    UserError,
    note_termination,
    os_error_line,
    raise_if_terminated,
)
from pyserini_moe.validate import seed_range

T = TypeVar("T")

# Errors caused by the user's input or machine, reported without a traceback: our own UserError
# and the operating system's refusals. Everything else (ValueError, KeyError, TypeError, ... from
# a bug) keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    UserError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
    PermissionError, ConnectionError,
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows a default only where it tells something: not for required arguments,
    switches, empty values, or a help text that already states its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or action.required or action.default in (None, False, [], ())
                or action.default is argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def finite_float(value: str) -> float:
    """argparse type of every number flag: a finite float. ``float`` alone takes "nan" and
    "inf", which pass every ``< 0`` check and end as runs of nan scores or a JVM traceback."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value!r}")
    return number


def positive_int(text: str) -> int:
    """argparse type of a count (hits, steps, a depth): an integer >= 1; the error names the flag
    as argparse lists it, every spelling included (``--hits/--k``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def seed(text: str) -> int:
    """argparse type of a ``--seed`` flag: an integer numpy takes, refused as the flag's own
    value (the recipe check would blame the recipe's field for it)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    problem = seed_range(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}, got {value}")
    return value


class _Store(argparse._StoreAction):
    """argparse's ``store``, but a flag given twice is refused where argparse would keep the
    last value and drop the first without a word: a list flag (``nargs`` + or *) always
    (``--runs A --runs B`` fused B alone), any other flag when the two values differ
    (``--hits 3 --hits 5``); an empty value too (an empty path is the current folder), and one
    holding a line break (an output named so breaks every listing of its folder)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        given = values if isinstance(values, list) else [values]
        if "" in given:  # `--index ''` meant "."
            parser.error(f"{option_string or self.dest} is given an empty value: give one")
        if any(isinstance(v, str) and ("\n" in v or "\r" in v) for v in given):
            parser.error(f"{option_string or self.dest} is given a value with a line break "
                         "(a pasted command?): no file name or value here holds one")
        if option_string and self.nargs in ("+", "*"):
            if getattr(namespace, f"_listed_{self.dest}", False):
                parser.error(f"{option_string} is given twice: give all its values after one "
                             f"{option_string}")
            setattr(namespace, f"_listed_{self.dest}", True)
        elif option_string:
            seen = getattr(namespace, f"_stored_{self.dest}", None)
            if seen is not None and seen[1] != values:
                parser.error(f"{seen[0]} {seen[1]} and {option_string} {values} set the same "
                             "thing: give it once")
            setattr(namespace, f"_stored_{self.dest}", (option_string, values))
        super().__call__(parser, namespace, values, option_string)


# What argparse takes for a negative number rather than a flag: its own ``-1`` / ``-.5``, and
# also ``-1e-3``, ``-inf``, ``-nan``, which it read as unknown flags ("--alpha -inf": "expected
# one argument"), so the value never reached :func:`finite_float` and its clear refusal.
NEGATIVE_NUMBER = re.compile(r"^-(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^-(?:inf|infinity|nan)$",
                             re.IGNORECASE)


class ArgumentParser(argparse.ArgumentParser):
    """Every command's parser (sub-commands' too): argparse's, with :class:`_Store` as the
    default action of every argument, argument groups included, and :data:`NEGATIVE_NUMBER` as
    what counts as a negative number."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER
        self.register("action", None, _Store)
        self.register("action", "store", _Store)

    def error(self, message: str) -> typing.NoReturn:
        """A usage error (a missing flag, a value of the wrong type) in one ``error:`` line, as
        every other refusal, where argparse prints its whole usage first."""
        self.exit(2, f"error: {message}\n")


class SetOnce(argparse.Action):
    """A setting with two spellings (Pyserini's ``--k`` beside ``--hits``): given twice with
    different values is refused, where argparse would keep the last one in silence."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        seen = getattr(namespace, f"_given_{self.dest}", None)
        if seen is not None and seen[1] != values:
            parser.error(f"{seen[0]} {seen[1]} and {option_string} {values} set the same "
                         "thing; give one")
        setattr(namespace, f"_given_{self.dest}", (option_string, values))
        setattr(namespace, self.dest, values)


def output_file(value: str) -> str:
    """argparse type of a file output: a directory there is refused before any work is done."""
    if Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a directory: name a file to write")
    return value


def settings_from(settings: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """The parsed flags as a settings dataclass (which checks itself when made): each of its
    fields from the flag of that name, ``overrides`` where the command resolved a value."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(settings)}
    return settings(**{**given, **overrides})


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; print a user error as ``error: ...`` on stderr and return 2.

    Ctrl-C (SIGINT) and SIGTERM both unwind as an interruption, so every atomic output removes
    its temporary: "interrupted", exit 130 (SIGTERM: 143). Run from the command line (``argv``
    None), the process then ends at once with ``os._exit``: a process that has started the JVM
    can crash in Python's own finaliser after an interrupted encoding (measured: SIGSEGV in the
    garbage collector, a ``hs_err_pid*.log`` left in the working directory), and there is nothing
    left to finalise."""
    command_line = argv is None
    if "--quiet" in (sys.argv[1:] if argv is None else argv):
        quiet_libraries()
    if command_line and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        code = main(argv)
        raise_if_terminated()  # a SIGTERM whose exception a finaliser swallowed
        return code
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the disk is full or read-only, a quota, an I/O error: said as such
        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        code = 143 if isinstance(e, Terminated) else 130
        print("interrupted", file=sys.stderr)
        if command_line:
            sys.stdout.flush()
            sys.stderr.flush()
            _release_semaphores()
            os._exit(code)
        return code


def _release_semaphores() -> None:
    """Unlink the named semaphores this process made (a tokenizer pool's queues and start
    barrier) before ``os._exit``, which skips the finalisers that would: else the resource
    tracker reports them as leaked after "interrupted" (9 of them, interrupted while tokenizer
    workers started). Only multiprocessing's own finalisers of priority >= 0 run (semaphore
    unlinking, queue closing), never a join."""
    if "multiprocessing.util" in sys.modules:
        from multiprocessing import util

        util._run_finalizers(0)


def quiet_libraries() -> None:
    """``--quiet``: no progress bars from the libraries either (transformers' "Loading weights",
    the hub's downloads), not only ours, and none of transformers' notices below an error (its
    LOAD REPORT of a backbone without the head a model adds); our own warnings stay."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"  # read when transformers is imported
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


def _interrupt(signum: int, frame: object) -> None:
    name = signal.Signals(signum).name
    note_termination(name)  # honoured before an output is committed, should this be swallowed
    raise Terminated(name)


def refuse_inside_outputs(flag: str, output: str | os.PathLike, file: bool = False) -> None:
    """An output folder (or ``file``) inside one of the toolkit's outputs (an index, a model, a
    training run) is refused, and a folder inside a collection: the outer folder would then hold
    files it did not write (and ``--overwrite`` of it refuse them). A file beside a collection's
    (a run) is common, and kept."""
    from pyserini_moe.data.beir import is_collection  # noqa: PLC0415 - light, but data's
    from pyserini_moe.outputs import output_kind  # noqa: PLC0415

    for place in Path(output).resolve().parents:
        kind = output_kind(place, named_only=True) or (
            "a collection" if not file and is_collection(place) else None)
        if kind is not None:
            advice = "write it elsewhere" if file else "name a folder of its own (made if missing)"
            raise UserError(f"{flag} {output} is inside {place}, {kind}: {advice}")

