"""Comparing with a recording: the tolerances by dtype, values and gradients
(`torch.testing.assert_close`), and the metric lines a program prints."""

from __future__ import annotations

import math
import re
from typing import Any

import torch

# Tolerances by dtype, in one place: (rtol, atol) for torch.testing.assert_close. float32 is looser
# than torch's default because XLA fuses and reorders float work; the others are torch's defaults.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float16: (1e-3, 1e-5),
}
# Gradients and parameters after an optimizer step sum many products: ten times the above.
GRADIENT_FACTOR = 10
# Printed metrics carry a few digits: relative 1e-3, or one unit in the last printed digit.
METRIC_RTOL = 1e-3
# The precision a migration may train in (the setting `precision`, in suite.json): the dtype a
# training step's forward pass and loss compute in, whose tolerances apply where looser.
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}


def tolerances(dtype: torch.dtype, computed_in: torch.dtype | None = None) -> tuple[float, float]:
    """(rtol, atol) for a value of `dtype` computed in `computed_in` (bfloat16 autocast): the
    looser of the two dtypes' tolerances for a floating value."""
    rtol, atol = TOLERANCES.get(dtype, (0.0, 0.0))
    if computed_in is not None and dtype.is_floating_point:
        lower = TOLERANCES[computed_in]
        rtol, atol = max(rtol, lower[0]), max(atol, lower[1])
    return rtol, atol


def assert_close(
    actual: Any,
    expected: Any,
    factor: float = 1,
    what: str = "value",
    computed_in: torch.dtype | None = None,
) -> None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{what}: expected a tensor, got {type(actual).__name__}")
        rtol, atol = tolerances(expected.dtype, computed_in)
        rtol, atol = rtol * factor, atol * factor
        if rtol and expected.numel():
            # an element near zero computed from large ones (a variance as E[x^2] - E[x]^2, a
            # difference of sums) carries the rounding of those large ones: the absolute part
            # of the tolerance scales with the tensor's largest magnitude
            largest = expected.detach().abs().nan_to_num(0.0, 0.0, 0.0).max()
            atol = max(atol, rtol * float(largest))
        torch.testing.assert_close(
            actual, expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}"
        )
    elif isinstance(expected, dict):
        if set(actual) != set(expected):
            raise AssertionError(f"{what}: keys {sorted(actual)} != recorded {sorted(expected)}")
        for key in expected:
            assert_close(actual[key], expected[key], factor, f"{what}[{key!r}]", computed_in)
    elif isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            raise AssertionError(f"{what}: {len(actual)} items, recorded {len(expected)}")
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, factor, f"{what}[{index}]", computed_in)
    elif isinstance(expected, float):
        rtol, atol = tolerances(torch.float32, computed_in)
        rtol, atol = max(rtol, 1e-4), max(atol, 1e-6)
        if not math.isclose(actual, expected, rel_tol=rtol * factor, abs_tol=atol * factor):
            raise AssertionError(f"{what}: {actual!r} != recorded {expected!r}")
    elif actual != expected:
        raise AssertionError(f"{what}: {actual!r} != recorded {expected!r}")


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
METRIC_WORDS = re.compile(r"loss|cost|acc|ppl|perplexity|error|score|bleu|mse|mae", re.IGNORECASE)
# A printed tensor names its device unless it is the CPU (`tensor([0.5], device='xla:0')`): the
# same value printed on either side of the migration reads the same without it.
PRINTED_DEVICE = re.compile(r",\s*device='\w+(?::\d+)?'")


def metric_lines(stdout: str) -> list[tuple[str, list[float]]]:
    """Printed lines that report a metric, as (the line with numbers masked, the numbers)."""
    lines = []
    for line in PRINTED_DEVICE.sub("", stdout).splitlines():
        if METRIC_WORDS.search(line) and _NUMBER.search(line):
            lines.append((line_shape(line), [float(n) for n in _NUMBER.findall(line)]))
    return lines


def line_shape(line: str) -> str:
    """A printed line with its numbers masked; padding that depends on a number's width goes."""
    return re.sub(r"\s+", " ", _NUMBER.sub("#", line)).strip()


def metric_close(
    got: float, want: float, tolerance: float = 1.0, computed_in: torch.dtype | None = None
) -> bool:
    """A printed number agrees with its recording: relative METRIC_RTOL (times `tolerance`), or
    one and a half units in the recording's last printed digit. A program trained in bfloat16
    (`computed_in`) prints numbers that carry its rounding, over every step before: relative
    bfloat16's tolerance times GRADIENT_FACTOR, as for a training step's values."""
    rtol = METRIC_RTOL * tolerance
    if computed_in is not None:
        rtol = max(rtol, tolerances(torch.float32, computed_in)[0] * GRADIENT_FACTOR * tolerance)
    return math.isclose(got, want, rel_tol=rtol, abs_tol=1.5 * 10 ** -_decimals(want))


def _decimals(number: float) -> int:
    text = repr(number)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0
