"""Arrays that remember which rows of Q and K they came from, and the Q·Kᵀ products they meet.

The grader calls a student's attention function with ``Q`` and ``K`` wrapped as :class:`Traced`,
an ``ndarray`` subclass.  Every traced array carries, per source ("Q", "K"), the set of source
rows it depends on and, while it is still a plain rearrangement of the source (slices, ``.T``,
``reshape``, ``astype``, elementwise ops with untraced operands), a *row map*: the source row
of each element.  Slicing a row map gives the exact rows of the slice, so ``Q[i0:i0 + Br]``
depends on rows ``i0 .. i0 + Br - 1`` only.

Whenever a product (``@``, ``np.matmul``, ``np.dot``, ``ndarray.dot``, ``np.einsum``,
``np.tensordot``, ``np.inner``, ``np.outer``, ``np.multiply`` ...) combines an operand that
depends on Q (and not K) with one that depends on K (and not Q), the :class:`Tracer` records
the pair (Q rows, K rows).  So it observes the tile products that were *computed*, whatever the
loop order: FA-1 (outer K/V, inner Q) and FA-2 (outer Q, inner K/V) give the same tiles.

Tracing is lost when the student converts the inputs to plain arrays (``np.asarray(Q)``,
``np.array(Q)``, copying into a preallocated buffer): then no product is seen, and the check
says so instead of guessing.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import numpy.ma  # noqa: F401  NumPy imports it on first use with a subclass; load it before student code

from ...checks.student_process import transferable

SOURCES = ("Q", "K")


class Tracer:
    """Collects the (Q rows, K rows) pairs of every product of a Q-part with a K-part."""

    def __init__(self, n_q: int, n_k: int) -> None:
        self.hits = np.zeros((n_q, n_k), dtype=np.int32)  # products that touched (q row, k row)
        self.products: list[tuple[np.ndarray, np.ndarray]] = []  # in the order they happened

    def record(self, operands) -> None:
        pure_q = [o._prov["Q"][0] for o in operands
                  if isinstance(o, Traced) and "Q" in o._prov and "K" not in o._prov]
        pure_k = [o._prov["K"][0] for o in operands
                  if isinstance(o, Traced) and "K" in o._prov and "Q" not in o._prov]
        for q_rows in pure_q:
            for k_rows in pure_k:
                self.hits[np.ix_(q_rows, k_rows)] += 1
                self.products.append((q_rows, k_rows))


def _rows_of(row_map: np.ndarray) -> np.ndarray:
    return np.unique(row_map)


def _plain(x):
    """The same data as a plain ndarray (lists and tuples converted element by element)."""
    if isinstance(x, Traced):
        return x.view(np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(item) for item in x)
    return x


def _traced_in(x, found: list) -> list:
    if isinstance(x, Traced):
        found.append(x)
    elif isinstance(x, (list, tuple)):
        for item in x:
            _traced_in(item, found)
    return found


def _wrap(result, tracer: Tracer | None, prov: dict):
    """Attach provenance to an ndarray result (scalars and non-arrays pass through)."""
    if isinstance(result, (list, tuple)):
        return type(result)(_wrap(r, tracer, prov) for r in result)
    if not isinstance(result, np.ndarray) or not prov:
        return result
    result = result.view(Traced) if not isinstance(result, Traced) else result
    result._tracer = tracer
    result._prov = dict(prov)
    return result


def _union(arrays: list, keep_maps_for_shape: tuple | None = None) -> dict:
    """Provenance of a result computed from ``arrays``: the union of their rows.

    With ``keep_maps_for_shape`` (elementwise ops), a source carried by exactly one operand that
    still has its row map keeps it, broadcast to the result's shape.
    """
    prov: dict = {}
    for source in SOURCES:
        carriers = [a for a in arrays if source in a._prov]
        if not carriers:
            continue
        rows = _rows_of(np.concatenate([a._prov[source][0] for a in carriers]))
        row_map = None
        maps = [a._prov[source][1] for a in carriers]
        if keep_maps_for_shape is not None and all(m is not None for m in maps) \
                and all(m is maps[0] for m in maps):
            try:
                row_map = np.broadcast_to(maps[0], keep_maps_for_shape)
            except ValueError:
                row_map = None
        prov[source] = (rows, row_map)
    return prov


def _restructure(parent: "Traced", result, operation):
    """Provenance of a rearrangement of ``parent``: apply the same operation to the row maps.

    ``result`` may be a list of arrays (``np.split``): the operation then gives a list of maps.
    """
    if isinstance(result, (list, tuple)):
        maps = {source: (operation(m) if m is not None else None) for source, (_, m) in parent._prov.items()}
        return type(result)(
            _with_maps(parent, part, {source: (None if m is None else m[i]) for source, m in maps.items()})
            for i, part in enumerate(result))
    if not isinstance(result, np.ndarray):
        return result
    maps = {source: (None if m is None else operation(m)) for source, (_, m) in parent._prov.items()}
    return _with_maps(parent, result, maps)


def _with_maps(parent: "Traced", result, maps: dict):
    if not isinstance(result, np.ndarray):
        return result
    prov = {}
    for source, (rows, _) in parent._prov.items():
        new_map = maps.get(source)
        if new_map is None:
            prov[source] = (rows, None)
        else:
            new_map = np.asarray(new_map)
            prov[source] = (_rows_of(new_map) if new_map.size else rows[:0], new_map)
    return _wrap(result, parent._tracer, prov)


#: Functions that combine their operands by multiplication: a Q-part times a K-part is a tile.
_PRODUCT_FUNCTIONS = {np.dot, np.vdot, np.inner, np.outer, np.einsum, np.tensordot, np.kron,
                      np.matmul, np.linalg.multi_dot, np.multiply, np.vecdot}
_PRODUCT_UFUNCS = {np.matmul, np.multiply, np.vecdot}
#: Functions that only rearrange one array: the same call on the row map gives the new map.
_STRUCTURAL_FUNCTIONS = {np.transpose, np.reshape, np.swapaxes, np.moveaxis, np.squeeze,
                         np.expand_dims, np.ravel, np.atleast_1d, np.atleast_2d, np.broadcast_to,
                         np.split, np.array_split, np.take, np.flip, np.copy,
                         np.ascontiguousarray, np.asfortranarray, np.require}
#: Creation functions: the result does not depend on the values of the input.
_CREATION_FUNCTIONS = {np.zeros_like, np.ones_like, np.empty_like, np.full_like}


class Traced(np.ndarray):
    """An ndarray that knows which rows of Q and K it depends on (see the module docstring)."""

    _tracer: Tracer | None = None
    _prov: dict = {}

    def __array_finalize__(self, obj) -> None:
        # Views made inside NumPy: same dependencies as the parent, element map unknown.
        self._tracer = getattr(obj, "_tracer", None)
        parent = getattr(obj, "_prov", None) or {}
        self._prov = {source: (rows, None) for source, (rows, _) in parent.items()}

    # --- rearrangements that keep the row map exact -----------------------------------------
    def __getitem__(self, key):
        result = super().__getitem__(key)
        plain_key = _plain(key)
        return _restructure(self, result, lambda m: m[plain_key])

    def __setitem__(self, key, value) -> None:
        super().__setitem__(_plain(key), _plain(value))
        if isinstance(value, Traced):
            for source in SOURCES:
                mine, theirs = self._prov.get(source), value._prov.get(source)
                if theirs is None:
                    continue
                rows = theirs[0] if mine is None else _rows_of(np.concatenate([mine[0], theirs[0]]))
                self._prov[source] = (rows, None)
        elif self._prov:  # untraced values overwrite part of the array: dependencies shrink at most
            self._prov = {s: (rows, None) for s, (rows, _) in self._prov.items()}

    def __iter__(self):  # NumPy iterates in C, past __getitem__: index row by row instead
        for i in range(len(self)):
            yield self[i]

    @property
    def T(self):
        return self.transpose()

    @property
    def mT(self):
        return self.swapaxes(-1, -2)

    def transpose(self, *axes):
        return _restructure(self, super().transpose(*axes), lambda m: m.transpose(*axes))

    def swapaxes(self, a, b):
        return _restructure(self, super().swapaxes(a, b), lambda m: m.swapaxes(a, b))

    def reshape(self, *shape, **kwargs):
        return _restructure(self, super().reshape(*shape, **kwargs), lambda m: m.reshape(*shape, **kwargs))

    def ravel(self, order="C"):
        return _restructure(self, super().ravel(order), lambda m: m.ravel(order))

    def flatten(self, order="C"):
        return _restructure(self, super().flatten(order), lambda m: m.flatten(order))

    def squeeze(self, axis=None):
        return _restructure(self, super().squeeze(axis), lambda m: m.squeeze(axis))

    def astype(self, dtype, *args, **kwargs):
        return _restructure(self, super().astype(dtype, *args, **kwargs), lambda m: m)

    def copy(self, order="C"):
        return _restructure(self, super().copy(order), lambda m: m.copy(order))

    def dot(self, other, out=None):
        return np.dot(self, other, out=out)

    # --- NumPy protocols --------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        traced = _traced_in(list(inputs), [])
        outputs = kwargs.get("out")
        traced_outputs = _traced_in(list(outputs), []) if outputs else []
        tracer = next((t._tracer for t in traced + traced_outputs if t._tracer is not None), None)
        if tracer is not None and method == "__call__" and ufunc in _PRODUCT_UFUNCS:
            tracer.record(inputs)
        if outputs:
            kwargs["out"] = tuple(_plain(o) for o in outputs)
        result = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        elementwise = method == "__call__" and ufunc.signature is None
        shape = np.shape(result[0] if isinstance(result, tuple) else result)
        prov = _union(traced, keep_maps_for_shape=shape if elementwise else None)
        if method == "at":  # ufunc.at(a, indices, b) changes a in place and returns None
            if isinstance(inputs[0], Traced):
                inputs[0]._prov = _union(traced)
            return result
        if outputs:  # in place: the out arrays now hold the result
            for out in traced_outputs:
                out._prov = dict(prov)
                out._tracer = out._tracer or tracer
            return outputs[0] if len(outputs) == 1 else outputs
        return _wrap(result, tracer, prov)

    def __array_function__(self, func, types, args, kwargs):
        traced = _traced_in(list(args) + list(kwargs.values()), [])
        tracer = next((t._tracer for t in traced if t._tracer is not None), None)
        if tracer is not None and func in _PRODUCT_FUNCTIONS:
            operands = [a for a in args if not isinstance(a, str)]
            if func is np.linalg.multi_dot and operands:
                operands = list(operands[0])
            tracer.record(operands)
        plain_args, plain_kwargs = _plain(tuple(args)), {k: _plain(v) for k, v in kwargs.items()}
        result = func(*plain_args, **plain_kwargs)
        if func in _CREATION_FUNCTIONS:
            return result
        if func in _STRUCTURAL_FUNCTIONS and args and isinstance(args[0], Traced) and len(traced) == 1:
            map_kwargs = {k: v for k, v in plain_kwargs.items() if k not in ("dtype", "like", "requirements")}
            return _restructure(args[0], result, lambda m: func(m, *plain_args[1:], **map_kwargs))
        return _wrap(result, tracer, _union(traced))


def trace(array: np.ndarray, source: str, tracer: Tracer) -> Traced:
    """``array`` as a Traced array whose row i is row i of ``source``."""
    traced = np.asarray(array).view(Traced)
    traced._tracer = tracer
    rows = np.arange(array.shape[0])
    row_map = np.broadcast_to(rows.reshape((-1,) + (1,) * (array.ndim - 1)), array.shape)
    traced._prov = {source: (rows, row_map)}
    return traced


def untraced(x):
    """The plain ndarray behind a traced result (anything else unchanged)."""
    return x.view(np.ndarray) if isinstance(x, Traced) else x


@transferable  # observed in the student process, judged in the worker
@dataclasses.dataclass(frozen=True)
class TileObservation:
    """What a traced call computed: which (Q-block, K-block) tiles met in a product."""

    n_q: int
    n_k: int
    Br: int
    Bc: int
    hits: np.ndarray  # (n_q, n_k): how many products touched each (q row, k row) pair
    products: tuple  # ((q rows, k rows), ...) in call order
    result: object

    @property
    def grid_shape(self) -> tuple[int, int]:
        return -(-self.n_q // self.Br), -(-self.n_k // self.Bc)

    @property
    def tiles(self) -> np.ndarray:
        """(Tr, Tc) boolean: the tile of Q-block i and K-block j was computed."""
        Tr, Tc = self.grid_shape
        grid = np.zeros((Tr, Tc), dtype=bool)
        q_rows, k_rows = np.nonzero(self.hits)
        grid[q_rows // self.Br, k_rows // self.Bc] = True
        return grid

    @property
    def count(self) -> int:
        return int(self.tiles.sum())

    @property
    def recomputed(self) -> bool:
        """Some (q row, k row) pair was multiplied more than once (a second pass over K)."""
        return bool((self.hits > 1).any())

    def q_block_order(self) -> list[int]:
        """The Q-block of every product, in call order (products spanning blocks give -1)."""
        order = []
        for q_rows, _ in self.products:
            blocks = np.unique(q_rows // self.Br)
            order.append(int(blocks[0]) if blocks.size == 1 else -1)
        return order


def expected_tiles(n_q: int, n_k: int, Br: int, Bc: int, causal: bool) -> np.ndarray:
    """(Tr, Tc) boolean: the tiles a correct run computes (causal: not entirely above the diagonal)."""
    Tr, Tc = -(-n_q // Br), -(-n_k // Bc)
    if not causal:
        return np.ones((Tr, Tc), dtype=bool)
    last_row = np.minimum((np.arange(Tr) + 1) * Br, n_q) - 1  # last query row of each Q-block
    first_col = np.arange(Tc) * Bc  # first key column of each K-block
    return first_col[None, :] <= last_row[:, None]


def observe_tiles(function, Q, K, V, *, Br: int, Bc: int, causal: bool, call=None) -> TileObservation:
    """Call ``function(Q, K, V, Br=Br, Bc=Bc, causal=causal)`` on traced Q and K; report the tiles.

    ``call(function, *args, **kwargs)`` runs the function (the grader passes its guarded
    caller); by default it is called directly, as in a notebook demo.
    """
    tracer = Tracer(Q.shape[0], K.shape[0])
    args = (trace(Q, "Q", tracer), trace(K, "K", tracer), V)
    kwargs = {"Br": Br, "Bc": Bc, "causal": causal}
    result = call(function, *args, **kwargs) if call is not None else function(*args, **kwargs)
    return TileObservation(Q.shape[0], K.shape[0], Br, Bc, tracer.hits.copy(),
                           tuple(tracer.products), untraced(result))


def plot_tiles(observation: TileObservation, *, title: str = ""):
    """The tile grid: computed tiles filled, the causal diagonal drawn over it."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    tiles = observation.tiles
    Tr, Tc = tiles.shape
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.imshow(tiles, cmap=ListedColormap(["#f2f2f2", "#3b7dd8"]), vmin=0, vmax=1,
              extent=(0, Tc * observation.Bc, Tr * observation.Br, 0))
    for x in range(0, Tc * observation.Bc + 1, observation.Bc):
        ax.axvline(x, color="white", linewidth=1)
    for y in range(0, Tr * observation.Br + 1, observation.Br):
        ax.axhline(y, color="white", linewidth=1)
    ax.plot([0, observation.n_k], [0, observation.n_q], color="crimson", linewidth=1.5,
            label="диагональ (j = i)")
    ax.set_xlim(0, Tc * observation.Bc)
    ax.set_ylim(Tr * observation.Br, 0)
    ax.set_xlabel("столбец j (ключи K)")
    ax.set_ylabel("строка i (запросы Q)")
    ax.set_title(title or f"посчитано блоков: {observation.count} из {Tr * Tc}")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig
