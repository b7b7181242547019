"""Compare a report with its golden copy the way another CPU can reproduce it (issue 47): the same words, the same
structure and the same decisions, with floats that may differ in their last digits.

Why a tolerance at all: least squares and bootstraps run through BLAS and numpy kernels whose SIMD paths differ
between CPUs (x86-64 AVX2 vs AVX-512 vs arm64 NEON), and a reduction summed in another order differs in the last
bits: floating-point addition is not associative (Goldberg, "What every computer scientist should know about
floating-point arithmetic", ACM Computing Surveys 23(1), 1991; numpy's ``np.sum`` notes that its pairwise
summation's result depends on how the data is blocked). The observed differences were ~1e-15 relative
(``31.834142410804535`` vs ``…564``, issue 47).

The rules:

* ``summary.json`` (full precision): parsed, then compared recursively: every key, list length, string, bool, None
  and int exactly; a float against a float within ``REL_TOL`` relative or ``ABS_TOL`` absolute. ``REL_TOL`` =
  1e-9 leaves six orders of magnitude for a least-squares fit's conditioning to amplify a 1e-15 difference, and is
  still far below anything the report states (its finest printed figure is ~1e-4 relative), so a real change in
  behaviour cannot hide in it. ``ABS_TOL`` = 1e-12 covers values that should be zero (a relative bound means
  nothing there).
* ``report.md`` and the printed answer (numbers rounded for print): the text with its numbers taken out must be
  identical; each number then matches its golden twin if they differ by at most one unit in the golden number's
  last printed place. Why one unit and not exactly: a value within 1e-9 of a rounding boundary (``0.4985`` at
  three places) prints as either neighbour on two CPUs, whatever the tolerance of the value itself, so an exact
  rule is not robust; one unit is the smallest rule that is, and the values behind the printed numbers are held
  to ``REL_TOL`` by the ``summary.json`` comparison. A sign is part of the text (``-`` and ``−`` alike), so a
  number cannot change sign unseen.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal

REL_TOL = 1e-9
ABS_TOL = 1e-12

NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
"""An unsigned decimal number as the report prints it (``31.9``, ``0.00566``, ``1e-05``, ``2048``)."""


def json_differences(got, expected, where: str = "$") -> list[str]:
    """Where ``got`` differs from ``expected`` (parsed JSON), by the rules above; [] when they agree."""
    if isinstance(expected, float) and isinstance(got, float):
        if math.isnan(expected) and math.isnan(got):
            return []
        if math.isclose(got, expected, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return []
        return [f"{where}: {got!r} != {expected!r} (rel tol {REL_TOL:g})"]
    if type(got) is not type(expected):
        return [f"{where}: {type(got).__name__} {got!r} != {type(expected).__name__} {expected!r}"]
    if isinstance(expected, dict):
        if list(got) != list(expected):
            return [f"{where}: keys {list(got)} != {list(expected)}"]
        return [d for key in expected for d in json_differences(got[key], expected[key], f"{where}.{key}")]
    if isinstance(expected, list):
        if len(got) != len(expected):
            return [f"{where}: length {len(got)} != {len(expected)}"]
        return [d for i, (g, e) in enumerate(zip(got, expected)) for d in json_differences(g, e, f"{where}[{i}]")]
    return [] if got == expected else [f"{where}: {got!r} != {expected!r}"]


def last_place(number: str) -> Decimal:
    """One unit in the last printed place of ``number``: ``31.9`` → 0.1, ``2048`` → 1, ``1.5e-3`` → 0.0001."""
    return Decimal(1).scaleb(Decimal(number).as_tuple().exponent)


def text_differences(got: str, expected: str) -> list[str]:
    """Where printed text ``got`` differs from ``expected``: its words exactly, its numbers within one unit in
    the golden number's last printed place; [] when they agree."""
    got_words, expected_words = NUMBER.split(got), NUMBER.split(expected)
    if got_words != expected_words:
        for line_got, line_expected in zip(NUMBER.sub("#", got).splitlines(),
                                           NUMBER.sub("#", expected).splitlines()):
            if line_got != line_expected:
                return [f"text: {line_got!r} != {line_expected!r}"]
        return ["text: the number of lines differs"]
    differences = []
    for g, e in zip(NUMBER.findall(got), NUMBER.findall(expected)):
        if abs(Decimal(g) - Decimal(e)) > last_place(e):
            differences.append(f"number {g} != {e} (more than one unit in its last place)")
    return differences


def report_differences(name: str, got: str, expected: str) -> list[str]:
    """``summary.json`` compared as JSON, anything else as printed text."""
    if name.endswith(".json"):
        return json_differences(json.loads(got), json.loads(expected))
    return text_differences(got, expected)
