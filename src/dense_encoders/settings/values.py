"""Checks of single values that several settings dataclasses share, run in their ``__post_init__``.

Each ``*_problem`` function says why a value is not valid (``None`` when it is); :func:`check_fields` raises it as
``ValueError`` naming the flag as argparse names one (``argument --k: must be a positive integer, got 0``), which the
command line prints as its one-line error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def positive_integer_problem(value) -> str | None:
    """Why ``value`` is no integer >= 1, or None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"must be a positive integer, got {value}"
    return None


def pair_threshold_problem(value: float) -> str | None:
    """Why ``value`` is no ``--pair-threshold`` (a fraction of a graded pair file's score scale, in (0, 1]), or None."""
    if not 0 < value <= 1:
        return f"{value:g} is not in (0, 1]: give a fraction of the score scale, e.g. 0.5"
    return None


def pair_scale_problem(value: float) -> str | None:
    """Why ``value`` is no ``--pair-scale`` (the largest possible score of a graded pair file), or None."""
    if not value > 0:
        return f"{value:g}: give the largest possible score, e.g. 1 or 5 (STSB)"
    return None


def flag_error(name: str, problem: str) -> ValueError:
    """The error of the field ``name``, named by its flag as argparse names it."""
    return ValueError(f"argument --{name.replace('_', '-')}: {problem}")


def check_fields(settings, problem: Callable[[object], str | None], names: Iterable[str],
                 optional: bool = True) -> None:
    """Raise :func:`flag_error` for the first field of ``names`` of ``settings`` whose value has a ``problem``;
    ``None`` passes when ``optional``."""
    for name in names:
        value = getattr(settings, name)
        if value is None and optional:
            continue
        found = problem(value) if value is not None else f"must be given, got {value}"
        if found is not None:
            raise flag_error(name, found)


__all__ = ["check_fields", "flag_error", "pair_scale_problem", "pair_threshold_problem", "positive_integer_problem"]
