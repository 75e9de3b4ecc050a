"""Lesson 10: what the checks share — parameter sets, numbers, the E4M3 format."""
from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

from ...checks.core import CheckFailed, describe_case
from ...checks.mistakes import failure, identify
from . import fa3sim
from .fa3sim import Params

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E4M3_MAX = 448.0

LOADS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
GEMMS = (0.5, 1.0, 1.5, 2.0)
SOFTMAXES = (0.25, 0.5, 1.0, 2.0, 3.0)


# --- parameter sets ---------------------------------------------------------------------------

def _expand(cases, draw, count: int) -> list[dict]:
    """Explicit cases as they are; ``{"seed": s, "count": c}`` becomes c sets ``draw(rng, case)``."""
    sets = []
    for c in cases:
        if "seed" not in c:
            sets.append(dict(c))
            continue
        rng = np.random.default_rng(c["seed"])
        sets.extend(draw(rng, c) for _ in range(c.get("count", count)))
    return sets


def _param_sets(cases, stages=(2, 3, 4)) -> list[dict]:
    """Pipeline parameter sets: tiles, load/GEMM/softmax times and ring depth."""
    def draw(rng, c):
        p = {"n_tiles": int(rng.integers(1, c.get("n_max", 16) + 1)),
             "t_load": float(rng.choice(LOADS)), "t_gemm": float(rng.choice(GEMMS)),
             "t_softmax": float(rng.choice(SOFTMAXES)), "stages": int(rng.choice(stages))}
        if c.get("strict"):  # copy-bound or compute-bound, never the tie
            if p["t_load"] == 2 * p["t_gemm"] + p["t_softmax"]:
                p["t_load"] += 0.25
        return p

    return _expand(cases, draw, 20)


def _number(got, *, what: str, case: str) -> float:
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise CheckFailed(f"{what} должна вернуть число, а вернула {type(got).__name__} ({case}).")
    value = float(got)
    if not np.isfinite(value):
        raise CheckFailed(f"{what} вернула {value} ({case}).")
    return value


def _call_text(name: str, **params) -> str:
    return f"{name}({describe_case(**params)})"


def _same_value(got: float, reference) -> bool:
    """The test of a number against the simulator's (and, naming a mistake, against a variant's)."""
    return abs(got - float(reference)) <= 1e-9 * max(1.0, abs(float(reference)))


def _expect_value(got, expected: float, *, call: str, variants: dict, args: tuple, hint: str,
                  source: str = "симулятор") -> None:
    value = _number(got, what=call.split("(")[0], case=call)
    if _same_value(value, expected):
        return
    mistake = identify(value, expected, variants, args, close=_same_value)
    raise failure(f"{call} = {value:g}, а {source} даёт {expected:g}.", mistake, then=f"Подсказка: {hint}")


def _simulated(p: dict) -> fa3sim.Trace:
    return fa3sim.run_sequential(Params(p["n_tiles"], p["t_load"], p["t_gemm"], p["t_softmax"], p["stages"]))


