"""Lesson 11: decode attention — flash-decoding over a paged KV cache with GQA.

Contracts (NumPy part):

* ``decode_traffic(L, Hq, Hkv, d, bytes_per_element) -> (kv_bytes, flops)``: one generated token of one
  sequence, one layer: the K and V bytes read (``2·L·Hkv·d·bytes``) and the attention FLOPs
  (``4·L·Hq·d``: q·K^T and p·V, a multiply and an add each).
* ``merge_partials(o_parts, lse_parts) -> (o, lse)``: S partial results of the same queries, merged by
  their log-sum-exp; parts with ``lse = -inf`` contribute nothing, all empty gives ``o = 0, lse = -inf``.
* ``paged_decode(q, k_pages, v_pages, block_table, lengths, num_splits=1) -> out`` (B, Hq, d) float32:
  position t of sequence b lives in page ``block_table[b, t // page_size]``, slot ``t % page_size``;
  query head h reads KV head ``h // (Hq // Hkv)``; scale 1/sqrt(d); stale slots and table entries (NaN,
  inf) never reach the result; ``num_splits`` contiguous groups of ``ceil(pages / num_splits)`` pages,
  merged with ``merge_partials``; page by page, never a whole sequence's K or V copied.

GPU part: ``DECODE_SRC`` (kernels ``paged_decode_split`` and ``paged_decode_combine``) and
``paged_decode_gpu(q, k_pages, v_pages, block_table, lengths, num_splits=None)`` on CuPy arrays, the same
contract; ``num_splits=None`` picks the split count itself.

Every case is built by :func:`make_case` from its parameters: a shuffled page pool, spare (freed) pages
and the slots past each sequence's end filled with NaN and inf, table entries past the last page
pointing at such pages, and optionally a first page shared by two sequences (a common prompt prefix).
"""
from __future__ import annotations

import math

import numpy as np
import numpy.random  # noqa: F401  loaded before student code runs: the guard refuses lazy imports after

from ...gpu import runtime as gpu, nvrtc
from ...gpu.sanitizer import sanitizer_verdict
from ...checks.core import CheckFailed, call_student, check, describe_case, require_array
from ...checks.core import tolerance as compare_tolerance
from ...checks.memory import Bound, MiB, measure_peak, peaks_within
from ...checks.mistakes import arrays_close, compare_or_name, failure, identify
from ...checks.scalars import expect_number, fmt

WHAT = "paged_decode"
#: The checks of the GPU part (`course check` gives the NumPy part and the GPU part a subtotal each).
GPU_PART = ("gpu_compiles", "gpu_equivalence", "gpu_splits", "gpu_memory", "gpu_bounds", "gpu_speed")
WHAT_GPU = "paged_decode_gpu"
LARGE_TOLERANCE = 2e-3  # float32 logits of size ~100-800 carry absolute errors ~1e-5..1e-4


# --- cases -------------------------------------------------------------------------------------

def pages_of(length: int, page_size: int) -> int:
    return -(-int(length) // int(page_size))


def make_case(B: int, Hq: int, Hkv: int, d: int, page_size: int, lengths, seed: int, shared: bool = False,
              q_scale: float = 1.0, keys_away: bool = False, spare: int = 3, stale_nan: bool = True):
    """(q, k_pages, v_pages, block_table, lengths) of one case; see the module docstring."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int32)
    assert lengths.shape == (B,) and (lengths >= 1).all()
    counts = [pages_of(n, page_size) for n in lengths]
    share = shared and B >= 2 and counts[0] >= 2 and counts[1] >= 2  # full first pages only
    needed = sum(counts) - (1 if share else 0)
    P = needed + spare
    ids = rng.permutation(P).astype(np.int32)  # shuffled pool: logical page i lives at ids[i]
    k_pages = rng.standard_normal((P, page_size, Hkv, d)).astype(np.float32)
    v_pages = rng.standard_normal((P, page_size, Hkv, d)).astype(np.float32)
    q = (rng.standard_normal((B, Hq, d)) * q_scale).astype(np.float32)
    if keys_away:  # every logit about -100·sqrt(d): keys point away from their query heads
        u = np.abs(rng.standard_normal((Hkv, d)))
        u /= np.linalg.norm(u, axis=-1, keepdims=True)
        G = Hq // Hkv
        q = (np.sqrt(d) * np.repeat(u, G, axis=0)[None] + 0.05 * rng.standard_normal((B, Hq, d))).astype(np.float32)
        k_pages = (-100.0 * np.sqrt(d) * u[None, None] + rng.standard_normal((P, page_size, Hkv, d))).astype(np.float32)
    max_pages = max(counts) + 1  # one table entry past every sequence's last page: stale
    table = np.empty((B, max_pages), dtype=np.int32)
    spare_ids = ids[needed:]
    used = 0
    for b in range(B):
        for j in range(max_pages):
            if j < counts[b]:
                if share and b == 1 and j == 0:
                    table[b, j] = table[0, 0]
                else:
                    table[b, j] = ids[used]
                    used += 1
            else:
                table[b, j] = spare_ids[(b + j) % len(spare_ids)]
    stale = np.array([np.nan, np.inf, -np.inf, np.nan], dtype=np.float32)
    for pages in (k_pages, v_pages):
        if not stale_nan:  # finite garbage instead: a wrong read gives a wrong number the grader can name
            pages[spare_ids] = 30 * rng.standard_normal(pages[spare_ids].shape)
            for b in range(B):
                last, fill = table[b, counts[b] - 1], int(lengths[b]) - (counts[b] - 1) * page_size
                pages[last, fill:] = 30 * rng.standard_normal(pages[last, fill:].shape)
            continue
        pages[spare_ids] = np.nan
        pages[spare_ids[0], :, :, :1] = np.inf
        for b in range(B):
            last, fill = table[b, counts[b] - 1], int(lengths[b]) - (counts[b] - 1) * page_size
            pages[last, fill:] = stale[(np.arange(page_size - fill) % 4)][:, None, None]
    return q, k_pages, v_pages, table, lengths


# --- the float64 oracle and the known mistakes ----------------------------------------------------

def gather(pages, table, b: int, n: int, *, use_table: bool = True) -> np.ndarray:
    """Positions 0..n-1 of sequence b as (n, Hkv, d) float64 (the grader may copy, students may not)."""
    ps = pages.shape[1]
    t = np.arange(n)
    page = table[b, t // ps] if use_table else t // ps
    return pages[page, t % ps].astype(np.float64)


def split_bounds(n_pages: int, num_splits: int, groups: str = "ceil") -> list[tuple[int, int]]:
    """The contract's groups: num_splits contiguous runs of ceil(n_pages / num_splits) pages (some empty); with
    ``groups`` the known wrong sizes: "floor" (the last pages in no group, all of them when n_pages < num_splits)
    and "floor_min1" (max(1, floor): the last pages in no group)."""
    per = {"ceil": -(-n_pages // num_splits), "floor": n_pages // num_splits,
           "floor_min1": max(1, n_pages // num_splits)}[groups]
    return [(min(s * per, n_pages), min((s + 1) * per, n_pages)) for s in range(num_splits)]


def _partial(q, k, v, scale: float, m0: float = -np.inf, underflow: str = "nan"):
    """(o, lse) of one group in float64: q (Hq, d), k/v (n, Hq, d) per query head."""
    if k.shape[0] == 0:
        return np.zeros(q.shape), np.full(q.shape[0], -np.inf)
    s = np.einsum("hd,nhd->hn", q, k) * scale
    m = np.maximum(s.max(axis=1), m0)
    with np.errstate(all="ignore"):
        p = np.exp(s - m[:, None])
        l = p.sum(axis=1)
        o = np.einsum("hn,nhd->hd", p, v) / l[:, None]
        lse = m + np.log(l)
    if underflow == "zero":  # every exp underflowed: the group treated as empty
        o, lse = np.where(l[:, None] > 0, o, 0.0), np.where(l > 0, lse, -np.inf)
    return o, lse


def merged(o_parts, lse_parts, how: str = "right"):
    """float64 merges: the right one and the known wrong ones."""
    o_parts, lse_parts = np.asarray(o_parts, np.float64), np.asarray(lse_parts, np.float64)
    with np.errstate(all="ignore"):
        if how == "mean":
            return o_parts.mean(axis=0), _lse(lse_parts)
        if how == "sum":
            return o_parts.sum(axis=0), _lse(lse_parts)
        if how == "no_max_guarded":  # as a student writes it in float32: 0/0 of empty parts guarded, inf/inf not
            w = np.exp(lse_parts.astype(np.float32))
            total = w.sum(axis=0)
            o = (w[..., None] * o_parts.astype(np.float32)).sum(0) / np.where(total > 0, total, np.float32(1))[..., None]
            return o.astype(np.float64), np.log(total).astype(np.float64)
        if how == "no_max":
            w = np.exp(lse_parts)
            return (w[..., None] * o_parts).sum(0) / w.sum(0)[..., None], np.log(w.sum(0))
        m = lse_parts.max(axis=0)
        if how == "nan_when_empty":
            w = np.exp(lse_parts - m)
            return (w[..., None] * o_parts).sum(0) / w.sum(0)[..., None], m + np.log(w.sum(0))
        if how == "lse_is_max":
            return merged(o_parts, lse_parts)[0], m
        lse = _lse(lse_parts)
        safe = np.where(np.isfinite(lse), lse, 0.0)
        w = np.where(np.isfinite(lse_parts), np.exp(lse_parts - safe), 0.0)
        return (w[..., None] * o_parts).sum(0), lse


def _lse(lse_parts):
    m = lse_parts.max(axis=0)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(all="ignore"):
        total = np.where(np.isfinite(lse_parts), np.exp(lse_parts - safe), 0.0).sum(0)
        return np.where(total > 0, safe + np.log(total), -np.inf)


def oracle(q, k_pages, v_pages, block_table, lengths, num_splits=1, *, heads: str = "div", scale: str = "sqrt",
           extra: str = "", use_table: bool = True, merge: str = "right", m0: float = -np.inf,
           empty_nan: bool = False, underflow: str = "nan", groups: str = "ceil") -> np.ndarray:
    """softmax(q K^T / sqrt(d)) V per sequence and head in float64 (and, with keywords, its known mistakes)."""
    B, Hq, d = q.shape
    Hkv, ps = k_pages.shape[2], k_pages.shape[1]
    G = Hq // Hkv
    kv_head = np.arange(Hq) // G if heads == "div" else np.arange(Hq) % Hkv
    factor = {"sqrt": 1 / math.sqrt(d), "d": 1 / d, "none": 1.0}[scale]
    out = np.empty((B, Hq, d))
    for b in range(B):
        n = int(lengths[b])
        n_pages = pages_of(n, ps)
        if extra == "stale":
            n = n_pages * ps
        elif extra == "drop_last":
            n -= 1
        k = gather(k_pages, block_table, b, n, use_table=use_table)[:, kv_head]
        v = gather(v_pages, block_table, b, n, use_table=use_table)[:, kv_head]
        qb = q[b].astype(np.float64)
        parts = []
        for a, z in split_bounds(n_pages, int(num_splits or 1), groups):
            lo, hi = a * ps, min(z * ps, n)
            o, lse = _partial(qb, k[lo:max(lo, hi)], v[lo:max(lo, hi)], factor, m0, underflow)
            if empty_nan and hi <= lo:
                o = np.full_like(o, np.nan)
            parts.append((o, lse))
        out[b] = merged(np.stack([o for o, _ in parts]), np.stack([l for _, l in parts]), merge)[0]
    return out


DECODE_MISTAKES = {
    "таблица страниц не используется: позиция t взята из страницы t // page_size пула, а не block_table[b, t // page_size]":
        lambda *a: oracle(*a, use_table=False),
    "GQA: голова h читает KV-голову h % Hkv, а нужна h // (Hq // Hkv)": lambda *a: oracle(*a, heads="mod"),
    "прочитаны устаревшие слоты последней страницы (позиции ≥ lengths[b])": lambda *a: oracle(*a, extra="stale"),
    "потеряна последняя позиция (новый токен): позиции до lengths[b] − 1 не включительно":
        lambda *a: oracle(*a, extra="drop_last"),
    "масштаб 1/d вместо 1/sqrt(d)": lambda *a: oracle(*a, scale="d"),
    "нет масштаба 1/sqrt(d): логиты q·k не поделены на sqrt(d)": lambda *a: oracle(*a, scale="none"),
    "группы по floor(страниц / num_splits) страниц вместо ceil: последние страницы не попали ни в одну группу "
    "(а если страниц меньше num_splits — все)": lambda *a: oracle(*a, groups="floor"),
    "группы по max(1, floor(страниц / num_splits)) страниц вместо ceil: последние страницы не попали ни в одну "
    "группу": lambda *a: oracle(*a, groups="floor_min1"),
    "слияние частей без весов: o — среднее o_s": lambda *a: oracle(*a, merge="mean"),
    "слияние частей без весов: o — сумма o_s": lambda *a: oracle(*a, merge="sum"),
    "пустая группа страниц даёт NaN (0/0) вместо o = 0, lse = −inf": lambda *a: oracle(*a, empty_nan=True),
    "слияние без вычитания максимума: exp(lse_s) переполняется или обнуляется": lambda *a: oracle(*a, merge="no_max"),
    "m начинается с 0, а не с −inf (все логиты ≪ 0 дают l = 0)": lambda *a: oracle(*a, m0=0.0),
    "m начинается с 0, а не с −inf (все логиты ≪ 0 дают l = 0, и часть считается пустой)":
        lambda *a: oracle(*a, m0=0.0, underflow="zero"),
    # last: where every exp underflows it gives o = 0 too, which the m-from-0 entry above names first
    "слияние без вычитания максимума: exp(lse_s) во float32 переполняется (inf / inf = NaN)":
        lambda *a: oracle(*a, merge="no_max_guarded"),
}

MERGE_MISTAKES = {
    "слияние без вычитания максимума: exp(lse_s) переполняется или обнуляется":
        lambda o, l: merged(o, l, "no_max"),
    "слияние без вычитания максимума: exp(lse_s) во float32 переполняется (inf / inf = NaN)":
        lambda o, l: merged(o, l, "no_max_guarded"),
    "слияние без весов: o — среднее o_s": lambda o, l: merged(o, l, "mean"),
    "слияние без весов: o — сумма o_s": lambda o, l: merged(o, l, "sum"),
    "все части пусты (lse = −inf): exp(−inf − (−inf)) = NaN вместо o = 0, lse = −inf":
        lambda o, l: merged(o, l, "nan_when_empty"),
    "lse = max lse_s (без логарифма суммы)": lambda o, l: merged(o, l, "lse_is_max"),
}


# --- 1. the decode roofline ---------------------------------------------------------------------

# The first case is an fp32 cache: with 2-byte elements "K only" and "elements, not bytes" give the same number.
TRAFFIC_CASES = ({"L": 4096, "Hq": 16, "Hkv": 8, "d": 128, "bytes_per_element": 4},
                 {"L": 32768, "Hq": 32, "Hkv": 8, "d": 128, "bytes_per_element": 2},
                 {"L": 1000, "Hq": 8, "Hkv": 8, "d": 64, "bytes_per_element": 4})


@check("lesson11.traffic", points=1, title="decode_traffic: байты KV и FLOP одного токена декода")
def traffic(decode_traffic, cases=TRAFFIC_CASES):
    lines = []
    for c in cases:
        L, Hq, Hkv, d, e = c["L"], c["Hq"], c["Hkv"], c["d"], c["bytes_per_element"]
        case = describe_case(**c)
        got = call_student(decode_traffic, L, Hq, Hkv, d, e, case=case, what="decode_traffic")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"decode_traffic должна вернуть пару (kv_bytes, flops), а вернула "
                              f"{type(got).__name__}: {fmt(got)} ({case}).")
        kv, flops = 2 * L * Hkv * d * e, 4 * L * Hq * d
        expect_number(got[0], kv, call="kv_bytes", case=case, exact=False, mistakes={
            "прочитан только K (нужны K и V)": L * Hkv * d * e,
            "байты посчитаны по Hq головам запроса (в кэше Hkv голов: GQA)": 2 * L * Hq * d * e,
            "забыт размер элемента (число элементов вместо байт)": 2 * L * Hkv * d},
            hint="K и V: 2 · L · Hkv · d · bytes_per_element.")
        expect_number(got[1], flops, call="flops", case=case, exact=False, mistakes={
            "посчитан только q·Kᵀ (нужно и p·V)": 2 * L * Hq * d,
            "умножение и сложение посчитаны как одна операция": 2 * L * Hq * d,
            "FLOP посчитаны по Hkv головам (считает каждая голова запроса)": 4 * L * Hkv * d},
            hint="q·Kᵀ и p·V: по 2 · L · d FLOP на голову запроса, голов Hq.")
        lines.append(f"L={L}, Hq={Hq}, Hkv={Hkv}, d={d}, {e} Б: {fmt(kv)} Б, {fmt(flops)} FLOP, "
                     f"интенсивность {flops / kv:.2f} FLOP/Б")
    return "\n".join(lines)


# --- 2. merge_partials ---------------------------------------------------------------------------

MERGE_CASES = ({"S": 4, "B": 3, "H": 2, "d": 8, "seed": 0},)


def merge_inputs(S: int, B: int, H: int, d: int, seed: int):
    """Partials with a spread of lse, some parts empty, one row all empty, one row of huge lse."""
    rng = np.random.default_rng(seed)
    o = rng.standard_normal((S, B, H, d)).astype(np.float32)
    lse = (3 * rng.standard_normal((S, B, H))).astype(np.float32)
    empty = rng.random((S, B, H)) < 0.3
    empty[0, 0, 0] = True
    lse[empty] = -np.inf
    o[empty] = 0.0
    lse[:, -1, 0] = -np.inf  # a row whose every part is empty
    o[:, -1, 0] = 0.0
    lse[:, 0, -1] = np.float32(1e4) + np.arange(S, dtype=np.float32)  # huge lse
    lse[:, 1 % B, -1] = np.float32(-1e4) - np.arange(S, dtype=np.float32)
    return o, lse


def _lse_mismatches(value, reference) -> np.ndarray:
    """Where an lse misses ``reference``: beyond 1e-5 + 1e-6·|reference|, or not the same infinity or NaN."""
    value, reference = np.asarray(value, np.float64), np.asarray(reference, np.float64)
    with np.errstate(all="ignore"):
        same = ((value == reference) | (np.isnan(value) & np.isnan(reference))
                | (np.isfinite(reference) & (np.abs(value - reference) <= 1e-5 + 1e-6 * np.abs(reference))))
    return ~same


def _same_lse(value, reference) -> bool:
    """The lse test as the matcher's ``close``."""
    return np.shape(value) == np.shape(reference) and not _lse_mismatches(value, reference).any()


def _check_lse(got, want, *, case: str, mistake_inputs) -> None:
    got = require_array(got, shape=want.shape, dtype="float32", case=case, name="lse")
    g = got.astype(np.float64)
    wrong = _lse_mismatches(got, want)
    if wrong.any():
        index = tuple(int(i) for i in np.argwhere(wrong)[0])
        mistake = identify(got, want, {k: (lambda o, l, f=f: f(o, l)[1]) for k, f in MERGE_MISTAKES.items()},
                           mistake_inputs, close=_same_lse)
        raise failure(f"lse не совпадает с log Σ exp(lse_s) ({case}): неверных {int(wrong.sum())} из {wrong.size}; "
                      f"первый индекс {index}: получено {g[index]!r}, ожидалось {want[index]!r}.", mistake,
                      otherwise="Подсказка: lse = m + log Σ exp(lse_s − m), m = max lse_s; если все части "
                                "пусты — lse = −inf.")


@check("lesson11.merge", points=2, title="merge_partials: слияние частей по lse, пустые части, огромные lse")
def merge(merge_partials, cases=MERGE_CASES):
    for c in cases:
        o_parts, lse_parts = merge_inputs(**c)
        case = describe_case(**c)
        args = (o_parts.copy(), lse_parts.copy())
        got = call_student(merge_partials, *args, case=case, what="merge_partials")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"merge_partials должна вернуть пару (o, lse), а вернула {type(got).__name__} ({case}).")
        want_o, want_lse = merged(o_parts, lse_parts)
        variants = {k: (lambda o, l, f=f: f(o, l)[0]) for k, f in MERGE_MISTAKES.items()}
        compare_or_name(got[0], want_o, inputs=(o_parts, lse_parts), variants=variants, case=case, name="o",
                        hint="o = Σ exp(lse_s − lse) · o_s; части с lse = −inf пропускаются; если пусты все — o = 0.")
        _check_lse(got[1], want_lse, case=case, mistake_inputs=(o_parts, lse_parts))
        for name, (before, after) in {"o_parts": (o_parts, args[0]), "lse_parts": (lse_parts, args[1])}.items():
            if not np.array_equal(before, after, equal_nan=True):
                raise CheckFailed(f"merge_partials изменила вход {name} ({case}): входы менять нельзя.")
    return "части с разными lse, пустые части, строка из одних пустых, lse порядка ±1e4"


# --- 3. paged_decode -----------------------------------------------------------------------------

VISIBLE = ({"B": 2, "Hq": 4, "Hkv": 2, "d": 16, "page_size": 16, "lengths": [37, 16], "seed": 0, "stale_nan": False},
           {"B": 3, "Hq": 8, "Hkv": 1, "d": 32, "page_size": 5, "lengths": [1, 10, 11], "seed": 1, "shared": True},
           {"B": 1, "Hq": 2, "Hkv": 2, "d": 8, "page_size": 1, "lengths": [9], "seed": 2})
SPLITS = ({"B": 2, "Hq": 4, "Hkv": 2, "d": 16, "page_size": 4, "lengths": [37, 9], "seed": 3, "num_splits": [1, 3, 20],
           "stale_nan": False},
          {"B": 3, "Hq": 2, "Hkv": 1, "d": 8, "page_size": 16, "lengths": [1, 33, 17], "seed": 4, "shared": True,
           "num_splits": [2, 5]})
LARGE = ({"B": 2, "Hq": 4, "Hkv": 2, "d": 32, "page_size": 8, "lengths": [40, 17], "seed": 5, "q_scale": 100.0,
          "num_splits": [1, 3]},
         {"B": 2, "Hq": 4, "Hkv": 1, "d": 64, "page_size": 16, "lengths": [50, 3], "seed": 6, "keys_away": True,
          "num_splits": [1, 3]})


def _inputs_of(c: dict):
    keys = ("B", "Hq", "Hkv", "d", "page_size", "lengths", "seed", "shared", "q_scale", "keys_away", "stale_nan")
    return make_case(**{k: c[k] for k in keys if k in c})


def _decode_case(paged_decode, c: dict, num_splits: int | None, *, hint: str = "", unchanged: bool = False,
                 **tolerance) -> np.ndarray:
    inputs = _inputs_of(c)
    case = describe_case(**{k: v for k, v in c.items() if k != "num_splits"},
                         **({} if num_splits is None else {"num_splits": num_splits}))
    args = tuple(a.copy() for a in inputs)
    kwargs = {} if num_splits is None else {"num_splits": num_splits}
    got = call_student(paged_decode, *args, case=case, what=WHAT, **kwargs)
    want = oracle(*inputs, num_splits or 1)
    compare_or_name(got, want, inputs=(*inputs, num_splits or 1), variants=DECODE_MISTAKES, case=case,
                    hint=hint, **tolerance)
    if unchanged:
        names = ("q", "k_pages", "v_pages", "block_table", "lengths")
        for name, before, after in zip(names, inputs, args):
            if not np.array_equal(before, after, equal_nan=True):
                raise CheckFailed(f"{WHAT} изменила вход {name} ({case}): входы менять нельзя (например, "
                                  "`q *= scale` масштабирует массив вызывающего; пишите `q * scale`).")
    return got


@check("lesson11.equivalence", points=3, title="paged_decode совпадает с эталоном float64 (num_splits = 1)")
def equivalence(paged_decode, cases=VISIBLE):
    for c in cases:
        _decode_case(paged_decode, c, None, unchanged=True,
                     hint="позиция t — страница block_table[b, t // page_size], слот t % page_size; голова h "
                          "читает KV-голову h // (Hq // Hkv); масштаб 1/sqrt(d); позиции 0..lengths[b] − 1 "
                          "включительно, дальше — устаревшие данные (NaN).")
    return f"случаев: {len(cases)}; перемешанный пул, общая страница, устаревшие слоты с NaN"


@check("lesson11.splits", points=2, title="num_splits: группы страниц, пустые группы, результат не зависит от разбиения")
def splits(paged_decode, cases=SPLITS):
    for c in cases:
        first = None
        for s in c["num_splits"]:
            got = _decode_case(paged_decode, c, s,
                               hint="каждая группа даёт (o, lse), группы сливаются merge_partials; пустая группа "
                                    "— o = 0, lse = −inf.")
            if first is not None and not np.allclose(got, first, atol=1e-5, rtol=1e-5):
                raise CheckFailed(f"результат зависит от num_splits: {c['num_splits'][0]} и {s} расходятся на "
                                  f"{float(np.max(np.abs(got - first))):.3g} ({describe_case(**c)}).")
            first = got if first is None else first
    return "; ".join(f"lengths={c['lengths']}, num_splits={c['num_splits']}" for c in cases)


@check("lesson11.large_logits", points=1, title="Большие логиты: q·100 и ключи «от запроса» (логиты ≈ −100·√d)")
def large_logits(paged_decode, cases=LARGE):
    for c in cases:
        for s in c["num_splits"]:
            _decode_case(paged_decode, c, s, atol=LARGE_TOLERANCE, rtol=LARGE_TOLERANCE,
                         hint="вычитайте текущий максимум и в online softmax (m начинается с −inf), и при "
                              "слиянии частей (exp(lse_s − lse)).")
    return f"без NaN и переполнения (допуск {LARGE_TOLERANCE:g})"


MEMORY_CASES = ({"B": 1, "Hq": 4, "Hkv": 2, "d": 64, "page_size": 16, "lengths": [5000], "seed": 7},)
MEMORY_SHARE = 0.25  # of one sequence's K and V for one KV head


@check("lesson11.memory", points=1, title="Память: страница за страницей, без копии K/V последовательности")
def memory(paged_decode, cases=MEMORY_CASES):
    def measure(c, case) -> Bound:
        inputs = _inputs_of(c)
        n, d = max(c["lengths"]), c["d"]
        one_head = 2 * n * d * 4
        allowed = MEMORY_SHARE * one_head + 4 * c["B"] * c["Hq"] * d * 4
        peak = measure_peak(paged_decode, *(a.copy() for a in inputs), case=case, what=WHAT)
        compare_or_name(peak.result, oracle(*inputs), inputs=(*inputs, 1), variants=DECODE_MISTAKES, case=case)
        return Bound(peak, allowed, [("пик paged_decode", peak.bytes, allowed), ("K и V одной головы", one_head, allowed)],
                     lambda table: (
                         f"пик памяти {peak.mib:.2f} МиБ больше допуска {allowed / MiB:.2f} МиБ ({case}).\n{table}\n"
                         "Вероятно, K или V последовательности собраны в один массив (np.concatenate, "
                         "k_pages[block_table[b]] или k_pages[pages].reshape(...)): читайте страницу за "
                         "страницей — k_pages[p] — это вид (view), а не копия, — и ведите online softmax."))

    return peaks_within(cases, measure)


# --- 4. the GPU port -------------------------------------------------------------------------------

KERNELS = ("paged_decode_split", "paged_decode_combine")


@check("lesson11.gpu_compiles", points=1, title="Ядра paged_decode_split/combine компилируются (NVRTC, без GPU)",
       memory_limit_gib=None, timeout_s=nvrtc.COMPILE_TIMEOUT_S)
def gpu_compiles(source):
    return nvrtc.compile_check(source, KERNELS, what="DECODE_SRC")


GPU_VISIBLE = ({"B": 2, "Hq": 4, "Hkv": 2, "d": 128, "page_size": 16, "lengths": [37, 16], "seed": 10, "stale_nan": False},
               {"B": 3, "Hq": 8, "Hkv": 1, "d": 64, "page_size": 5, "lengths": [1, 10, 11], "seed": 11, "shared": True},
               {"B": 1, "Hq": 2, "Hkv": 2, "d": 128, "page_size": 1, "lengths": [9], "seed": 12},
               {"B": 2, "Hq": 16, "Hkv": 8, "d": 128, "page_size": 16, "lengths": [700, 300], "seed": 13},
               {"B": 2, "Hq": 4, "Hkv": 2, "d": 128, "page_size": 8, "lengths": [40, 17], "seed": 14, "q_scale": 100.0},
               {"B": 2, "Hq": 4, "Hkv": 1, "d": 64, "page_size": 16, "lengths": [50, 3], "seed": 15, "keys_away": True})
GPU_SPLITS = ({"B": 2, "Hq": 16, "Hkv": 8, "d": 128, "page_size": 16, "lengths": [1000, 33], "seed": 16,
               "num_splits": [None, 1, 3, 100]},
              {"B": 2, "Hq": 4, "Hkv": 2, "d": 128, "page_size": 8, "lengths": [40, 17], "seed": 20, "q_scale": 100.0,
               "num_splits": [1, 3]},
              {"B": 2, "Hq": 4, "Hkv": 1, "d": 64, "page_size": 16, "lengths": [50, 3], "seed": 21, "keys_away": True,
               "num_splits": [1, 3]},
              # a split longer than the kernel's slice of the block table in shared memory (TABLE_SLOTS = 512 pages):
              # its later pages come from the table itself (on the emulator too: 1050 pages)
              {"B": 1, "Hq": 2, "Hkv": 1, "d": 64, "page_size": 1, "lengths": [4200], "seed": 22, "num_splits": [1, 2]})


#: On the PTX emulator (no GPU) a sequence longer than this runs at a quarter of its length, at least this long,
#: plus its own partial last page (4096 -> 1024, 3000 -> 758 with pages of 16): the emulator executes every thread in
#: turn, about a second per thousand tokens of one batch, and gpu_splits runs its case once per num_splits.
EMULATOR_MIN_LENGTH = 256


def emulator_sized(cases) -> list[dict]:
    """The cases of gpu_splits and gpu_memory as the emulator runs them (:data:`EMULATOR_MIN_LENGTH`): the same
    heads, pages, seeds and splits, shorter sequences."""
    def shorter(length: int, page_size: int) -> int:
        if length <= EMULATOR_MIN_LENGTH:
            return length
        return max(EMULATOR_MIN_LENGTH, length // 4) + length % page_size

    return [{**c, "lengths": [shorter(n, c["page_size"]) for n in c["lengths"]]} for c in cases]


def _to_host(got, inputs, num_splits, case: str, *, atol: float | None = None, rtol: float | None = None) -> np.ndarray:
    """gpu.to_host; a NaN in the result is still matched against the known mistakes (stale slots read...),
    by the tolerance the comparison will use."""
    try:
        return gpu.to_host(got, shape=inputs[0].shape, case=case)
    except CheckFailed as error:
        host = gpu.host_copy(got)
        if host is not None and host.shape == inputs[0].shape and host.dtype == np.float32:
            args = (*inputs, num_splits or 1)
            mistake = identify(host, oracle(*args), DECODE_MISTAKES, args,
                               close=arrays_close(*compare_tolerance("float32", atol, rtol)))
            if mistake:
                raise failure(str(error), mistake) from None
        raise


def _gpu_case(fn, c: dict, num_splits, *, check_unchanged: bool = False, **tolerance) -> np.ndarray:
    inputs = _inputs_of(c)
    case = describe_case(**{k: v for k, v in c.items() if k != "num_splits"}, num_splits=num_splits)
    dev = [gpu.device(a) for a in inputs]
    got = gpu.run_student(fn, *dev, case=case, what=WHAT_GPU, num_splits=num_splits)
    large = c.get("q_scale", 1.0) > 1 or c.get("keys_away")
    tol = {"atol": LARGE_TOLERANCE, "rtol": LARGE_TOLERANCE} if large else {}
    host = _to_host(got, inputs, num_splits, case, **{**tol, **tolerance})
    compare_or_name(host, oracle(*inputs, num_splits or 1), inputs=(*inputs, num_splits or 1),
                    variants=DECODE_MISTAKES, case=case, **{**tol, **tolerance},
                    hint="стоит проверить индекс страницы (sm_pages[t / page_size - p0] в срезе, "
                         "block_table[b, t / page_size] за его пределами), KV-голову h / G, "
                         "границу t < lengths[b] и слияние частей по lse.")
    if check_unchanged:
        for name, before, after in zip(("q", "k_pages", "v_pages", "block_table", "lengths"), inputs, dev):
            if not np.array_equal(before, after.get(), equal_nan=True):
                raise CheckFailed(f"{WHAT_GPU} изменила вход {name} ({case}).")
    return host


@gpu.gpu_check("lesson11.gpu_equivalence", points=3,
               title="GPU: совпадение с эталоном float64 (GQA, страницы 1/5/16, NaN в устаревших слотах, большие логиты)")
def gpu_equivalence(paged_decode_gpu, cases=GPU_VISIBLE):
    for c in cases:
        _gpu_case(paged_decode_gpu, c, None, check_unchanged=True)
    return f"{len(cases)} случаев (num_splits=None)"


@gpu.gpu_check("lesson11.gpu_splits", points=1, title="GPU: результат не зависит от num_splits (1, 3, больше числа страниц)",
               emulator_cases=emulator_sized)
def gpu_splits(paged_decode_gpu, cases=GPU_SPLITS):
    for c in cases:
        first = None
        for s in c["num_splits"]:
            got = _gpu_case(paged_decode_gpu, c, s)
            tol = LARGE_TOLERANCE if c.get("q_scale", 1.0) > 1 or c.get("keys_away") else 1e-5
            if first is not None and not np.allclose(got, first, atol=tol, rtol=tol):
                raise CheckFailed(f"результат зависит от num_splits: {c['num_splits'][0]} и {s} расходятся на "
                                  f"{float(np.max(np.abs(got - first))):.3g} ({describe_case(**c)}).")
            first = got if first is None else first
    return "num_splits = " + ", ".join(str(s) for c in cases for s in c["num_splits"])


GPU_MEMORY_CASES = ({"B": 4, "Hq": 16, "Hkv": 8, "d": 128, "page_size": 16, "lengths": [4096, 3000, 4000, 17],
                     "seed": 17},)


@gpu.gpu_check("lesson11.gpu_memory", points=1, title="GPU: нет непрерывной копии KV-кэша на устройстве",
               emulator_cases=emulator_sized)  # a copy of the emulator's case (1024, 758, 1000, 17 tokens): 22 MiB
def gpu_memory(paged_decode_gpu, cases=GPU_MEMORY_CASES):
    for c in cases:
        inputs = _inputs_of(c)
        case = describe_case(**c)
        dev = [gpu.device(a) for a in inputs]
        with gpu.DeviceAllocations() as seen:
            got = gpu.run_student(paged_decode_gpu, *dev, case=case, what=WHAT_GPU)
        host = _to_host(got, inputs, None, case)
        compare_or_name(host, oracle(*inputs), inputs=(*inputs, 1), variants=DECODE_MISTAKES, case=case)
        B, Hq, d = inputs[0].shape
        kv = 2 * int(np.sum(inputs[4])) * c["Hkv"] * d * 4
        allowed = 4 * MiB + B * Hq * d * 4
        if seen.total > allowed:
            raise CheckFailed(
                f"на устройстве выделено {seen.total / MiB:.1f} МиБ за вызов ({len(seen.sizes)} выделений, самое большое "
                f"{seen.largest / MiB:.1f} МиБ), допустимо {allowed / MiB:.1f} МиБ (выход и частичные (o, lse)); "
                f"K и V этих последовательностей занимают {kv / MiB:.0f} МиБ ({case}).\nЯдро должно читать страницы "
                "пула на месте, по таблице страниц, а не собирать кэш в непрерывный массив.")
    return f"выделено {seen.total / MiB:.2f} МиБ (копия K и V заняла бы {kv / MiB:.0f} МиБ)"


BOUNDS_CASES = ({"B": 2, "Hq": 4, "Hkv": 2, "d": 64, "page_size": 5, "lengths": [23, 7], "seed": 22, "shared": True},)


def bounds_inputs(**c):
    """Arguments for the bounds-and-races run of one case (built in the process that runs it)."""
    return tuple(gpu.device(a) for a in _inputs_of(c))


@gpu.gpu_check("lesson11.gpu_bounds", points=1, timeout_s=150,
               title="GPU: нет выходов за границы, гонок и чтения неинициализированной памяти")
def gpu_bounds(paged_decode_gpu, cases=BOUNDS_CASES):
    return sanitizer_verdict(paged_decode_gpu, f"{__name__}:bounds_inputs", cases,
                             lambda c: _gpu_case(paged_decode_gpu, c, None), races=True)


SPEED_SHARE = 0.5
SPEED_CASES = ({"B": 1, "lengths": 32768, "seed": 18}, {"B": 8, "lengths": 8192, "seed": 19})


def speed_inputs(B: int, length: int, seed: int, Hq: int = 16, Hkv: int = 8, d: int = 128, page_size: int = 16):
    """A large case built fast (no stale filling needed beyond the tail): Qwen3-0.6B heads, fp32 cache."""
    rng = np.random.default_rng(seed)
    n_pages = pages_of(length, page_size)
    P = B * n_pages
    table = rng.permutation(P).astype(np.int32).reshape(B, n_pages)
    lengths = np.full(B, length, dtype=np.int32)
    uniform = lambda shape: rng.random(shape, dtype=np.float32) - np.float32(0.5)  # noqa: E731  (fast to draw)
    return uniform((B, Hq, d)), uniform((P, page_size, Hkv, d)), uniform((P, page_size, Hkv, d)), table, lengths


@gpu.gpu_check("lesson11.gpu_speed", points=2, timeout_s=120, timed=True,
               title=f"GPU: скорость — не меньше {int(SPEED_SHARE * 100)} % от пропускной способности копирования")
def gpu_speed(paged_decode_gpu, cases=SPEED_CASES):
    lines = []
    for c in cases:
        B, n = c["B"], c["lengths"]
        inputs = speed_inputs(B, n, c["seed"])
        case = describe_case(**c, Hq=16, Hkv=8, d=128, page_size=16)
        dev = [gpu.device(a) for a in inputs]
        got = gpu.to_host(gpu.run_student(paged_decode_gpu, *dev, case=case, what=WHAT_GPU), shape=inputs[0].shape,
                          case=case)
        rows = slice(0, 1)  # the oracle on the first sequence: the gate stays fast
        small = (inputs[0][rows], inputs[1], inputs[2], inputs[3][rows], inputs[4][rows])
        compare_or_name(got[rows], oracle(*small), inputs=(*small, 1), variants=DECODE_MISTAKES, case=case)
        ms = gpu.time_student(paged_decode_gpu, *dev, case=case, what=WHAT_GPU)
        kv = 2 * B * n * 8 * 128 * 4
        copy = gpu.copy_bandwidth(kv)
        share = kv / (ms * 1e-3) / copy
        lines.append(f"B={B}, L={n}: {ms:.3f} мс, KV {kv / 1e6:.0f} МБ → {kv / ms / 1e6:.0f} ГБ/с = {100 * share:.0f} % "
                     f"от копирования ({copy / 1e9:.0f} ГБ/с на этом GPU)")
        if share < SPEED_SHARE:
            raise CheckFailed(
                "\n".join(lines) + f"\nНужно не меньше {int(SPEED_SHARE * 100)} % ({case}). Частые причины: при B=1 "
                "запущено всего B·Hkv блоков — без разбиения контекста (num_splits) GPU почти пуст; каждый поток "
                "читает по одному float вместо float4; G голов запроса читают страницу каждая заново.")
    return "\n".join(lines)
