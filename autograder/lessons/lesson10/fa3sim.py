"""A discrete-event model of FlashAttention-3's main loop on a virtual clock.

One thread block of the FA3 forward kernel, reduced to what decides its timeline:

* a **producer** (the TMA warp) loads tile j of K and V into the next slot of an S-stage
  shared-memory ring; a slot is free again once the consumer's ``P V`` GEMM on it completed;
* one or more **consumer warpgroups** run a *program*: a list of ``(op, tile)`` instructions
  (``gemm_qk``, ``wait_qk``, ``softmax``, ``gemm_pv``, ``wait_pv``, and ``sync`` / ``arrive``
  for the ping-pong barrier, whose tile is ignored).  GEMMs are *issued* asynchronously to
  the **tensor cores**, one unit shared by all warpgroups that runs GEMMs one at a time in
  issue order; ``softmax`` keeps its warpgroup busy (exp runs on the slow special-function
  units, not on the tensor cores).

Time is virtual: every duration is a parameter, nothing reads a wall clock, and the same input
always gives the same events.  Every load, GEMM and softmax is recorded as an :class:`Event`,
from which makespans, utilisations and Gantt charts are computed.
Simplifications (said in the lesson): a slot holds K_j and V_j together; the O rescale is free;
each warpgroup has its own stream of tiles (its own block of Q), loaded round-robin.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
from typing import Iterable, Sequence

GEMM_OPS = ("gemm_qk", "gemm_pv")
TILE_OPS = ("gemm_qk", "wait_qk", "softmax", "gemm_pv", "wait_pv")
BARRIER_OPS = ("sync", "arrive")


class ScheduleError(ValueError):
    """A program that a real kernel could not run (a hazard, a missing op, a deadlock)."""


@dataclasses.dataclass(frozen=True)
class Params:
    """Durations in virtual time units; ``t_load`` may give one duration per tile."""

    n_tiles: int
    t_load: float | tuple[float, ...]
    t_gemm: float
    t_softmax: float
    stages: int = 2

    def load_time(self, tile: int) -> float:
        if isinstance(self.t_load, (int, float)):
            return float(self.t_load)
        return float(self.t_load[tile])


@dataclasses.dataclass(frozen=True)
class Event:
    """One recorded interval: ``unit`` is "tma", "tensor" or "softmax"."""

    unit: str
    kind: str  # "load", "gemm_qk", "gemm_pv" or "softmax"
    tile: int
    warpgroup: int
    start: float
    end: float
    slot: int | None = None  # the ring slot of a load

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class Trace:
    """Everything one simulation recorded."""

    events: tuple[Event, ...]
    params: Params
    warpgroups: int = 1

    @property
    def makespan(self) -> float:
        """From the first event's start to the last event's end."""
        if not self.events:
            return 0.0
        return max(e.end for e in self.events) - min(e.start for e in self.events)

    def select(self, unit: str | None = None, warpgroup: int | None = None) -> list[Event]:
        return [e for e in self.events if (unit is None or e.unit == unit)
                and (warpgroup is None or e.warpgroup == warpgroup)]

    def busy(self, unit: str) -> float:
        """Total time ``unit`` was busy (events of one unit never overlap, except softmax across warpgroups)."""
        return sum(e.duration for e in self.select(unit))

    def utilisation(self, unit: str = "tensor") -> float:
        """Busy time of ``unit`` over the makespan (for "softmax": averaged over warpgroups)."""
        span = self.makespan
        if span == 0:
            return 0.0
        share = self.warpgroups if unit == "softmax" else 1
        return self.busy(unit) / span / share


# --- programs ---------------------------------------------------------------------------------

def _tiles(tiles: int | Iterable[int]) -> list[int]:
    return list(range(tiles)) if isinstance(tiles, int) else list(tiles)


def sequential_program(tiles: int | Iterable[int]) -> list[tuple[str, int]]:
    """No overlap inside the warpgroup: S = QK^T, softmax, O += PV, one tile after another."""
    program = []
    for j in _tiles(tiles):
        program += [("gemm_qk", j), ("wait_qk", j), ("softmax", j), ("gemm_pv", j), ("wait_pv", j)]
    return program


def pingpong_program(tiles: int | Iterable[int], barriers: bool = True) -> list[tuple[str, int]]:
    """One warpgroup's program for ping-pong: its GEMMs are issued between sync and arrive.

    Each turn issues ``P_{j-1} V_{j-1}`` and ``Q K_j^T`` together; while the other warpgroups
    take their turns on the tensor cores, this one runs its softmax.  ``barriers=False`` gives the
    same program without the barrier, so the warpgroups compete for the tensor cores freely.
    """
    tiles = _tiles(tiles)
    sync = [("sync", -1)] if barriers else []
    arrive = [("arrive", -1)] if barriers else []
    program = sync + [("gemm_qk", tiles[0])] + arrive + [("wait_qk", tiles[0]), ("softmax", tiles[0])]
    for previous, j in zip(tiles, tiles[1:]):
        program += sync + [("gemm_pv", previous), ("gemm_qk", j)] + arrive
        program += [("wait_qk", j), ("softmax", j), ("wait_pv", previous)]
    program += sync + [("gemm_pv", tiles[-1])] + arrive + [("wait_pv", tiles[-1])]
    return program


def pingpong_programs(tiles: int | Iterable[int], warpgroups: int = 2,
                      barriers: bool = True) -> list[list[tuple[str, int]]]:
    """The same ping-pong program for each of ``warpgroups`` consumer warpgroups."""
    return [pingpong_program(tiles, barriers) for _ in range(warpgroups)]


def validate_program(program: Sequence, n_tiles: int | None = None, warpgroup: int = 0) -> list[int]:
    """Raise ScheduleError unless ``program`` is one a kernel could run; return its tiles in order.

    Rules (positions are 1-based in messages):
    every tile gets each of the five tile ops exactly once, tiles in increasing order per op;
    ``wait_qk j`` after ``gemm_qk j`` and ``wait_pv j`` after ``gemm_pv j``;
    ``softmax j`` after ``wait_qk j`` (S_j must be computed);
    ``gemm_pv j`` after ``softmax j`` (P_j must exist);
    ``gemm_qk`` of the tile two positions later only after ``wait_pv j`` (registers hold S/P of
    two tiles: the 2-stage pipeline reuses the buffer of tile j).
    """
    where = f"программа варп-группы {warpgroup}: " if warpgroup else "программа: "
    try:
        ops = [(str(op), int(j)) for op, j in program]
    except (TypeError, ValueError):
        raise ScheduleError(where + "ожидался список пар (операция, номер тайла), "
                            "например [('gemm_qk', 0), ('wait_qk', 0), ...]") from None
    done: dict[tuple[str, int], int] = {}
    order: list[int] = []
    for position, (op, j) in enumerate(ops, start=1):
        at = f"{where}шаг {position} ({op!r}, {j})"
        if op in BARRIER_OPS:
            continue
        if op not in TILE_OPS:
            raise ScheduleError(f"{at}: неизвестная операция; допустимы {', '.join(TILE_OPS + BARRIER_OPS)}")
        if (op, j) in done:
            raise ScheduleError(f"{at}: операция для тайла {j} уже была на шаге {done[(op, j)]}")
        if j < 0 or (n_tiles is not None and j >= n_tiles):
            raise ScheduleError(f"{at}: тайла {j} нет (тайлы 0..{(n_tiles or 1) - 1})")
        earlier = [t for (o, t) in done if o == op and t > j]
        if earlier:
            raise ScheduleError(f"{at}: тайлы обрабатываются по порядку, а {op} для тайла {max(earlier)} "
                                "уже был раньше (кольцо TMA заполняется по порядку)")
        if op == "gemm_qk":
            order.append(j)
            if len(order) >= 3:
                two_before = order[-3]
                if ("wait_pv", two_before) not in done:
                    raise ScheduleError(
                        f"{at}: S_{j} = Q K_{j}^T пишет в регистры тайла {two_before}, а его P V ещё не "
                        f"дождались (нужен ('wait_pv', {two_before}) раньше): в регистрах помещаются S/P "
                        "только двух тайлов")
        elif op == "wait_qk" and ("gemm_qk", j) not in done:
            raise ScheduleError(f"{at}: ждём GEMM Q K_{j}^T, который ещё не выпущен")
        elif op == "softmax" and ("wait_qk", j) not in done:
            raise ScheduleError(f"{at}: softmax тайла {j} до ('wait_qk', {j}): S_{j} ещё не посчитан "
                                "(GEMM асинхронный, результат можно читать только после wait)")
        elif op == "gemm_pv" and ("softmax", j) not in done:
            raise ScheduleError(f"{at}: O += P_{j} V_{j} до softmax тайла {j}: P_{j} ещё нет")
        elif op == "wait_pv" and ("gemm_pv", j) not in done:
            raise ScheduleError(f"{at}: ждём GEMM P_{j} V_{j}, который ещё не выпущен")
        done[(op, j)] = position
    tiles = sorted({j for (_, j) in done})
    if n_tiles is not None and tiles != list(range(n_tiles)):
        missing = sorted(set(range(n_tiles)) - set(tiles))
        raise ScheduleError(f"{where}нет операций для тайлов {missing} (всего тайлов {n_tiles})")
    for j in tiles:
        for op in TILE_OPS:
            if (op, j) not in done:
                raise ScheduleError(f"{where}для тайла {j} нет операции {op!r}: у каждого тайла ровно "
                                    f"по одной операции {', '.join(TILE_OPS)}")
    return order


# --- the engine -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Delay:
    duration: float


@dataclasses.dataclass(frozen=True)
class _Wait:
    signal: tuple


class _Clock:
    """Callbacks on a virtual clock; processes are generators yielding _Delay or _Wait."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._count = itertools.count()  # ties at one instant run in the order they were scheduled
        self._raised: set = set()
        self._waiting: dict[tuple, list] = {}
        self.blocked: dict[str, tuple] = {}

    def at(self, time: float, callback) -> None:
        heapq.heappush(self._heap, (time, next(self._count), callback))

    def signal(self, name: tuple) -> None:
        self._raised.add(name)
        for resume in self._waiting.pop(name, []):
            self.at(self.now, resume)

    def spawn(self, name: str, process) -> None:
        def step():
            self.blocked.pop(name, None)
            try:
                request = next(process)
            except StopIteration:
                return
            if isinstance(request, _Delay):
                self.at(self.now + request.duration, step)
            elif request.signal in self._raised:
                self.at(self.now, step)
            else:
                self.blocked[name] = request.signal
                self._waiting.setdefault(request.signal, []).append(step)

        self.at(self.now, step)

    def run(self) -> None:
        while self._heap:
            self.now, _, callback = heapq.heappop(self._heap)
            callback()


def simulate(programs: Sequence[Sequence], params: Params) -> Trace:
    """Run one program per consumer warpgroup (a single program may be passed) and record it all."""
    if programs and isinstance(programs[0], tuple):
        programs = [programs]
    programs = [list(p) for p in programs]
    if params.stages < 1:
        raise ScheduleError("в кольце должна быть хотя бы одна ячейка (stages >= 1)")
    for w, program in enumerate(programs):
        validate_program(program, params.n_tiles, w)
    n_wg = len(programs)
    clock = _Clock()
    events: list[Event] = []
    load_order = [(w, j) for j in range(params.n_tiles) for w in range(n_wg)]
    load_index = {key: k for k, key in enumerate(load_order)}

    def producer():
        for k, (w, j) in enumerate(load_order):
            if k >= params.stages:
                yield _Wait(("free", k - params.stages))
            start = clock.now
            yield _Delay(params.load_time(j))
            events.append(Event("tma", "load", j, w, start, clock.now, slot=k % params.stages))
            clock.signal(("loaded", w, j))

    queue: list[tuple[str, int, int]] = []
    tensor = {"busy": False}

    def start_next_gemm():
        if tensor["busy"] or not queue:
            return
        kind, w, j = queue.pop(0)
        tensor["busy"] = True
        start = clock.now

        def finish():
            tensor["busy"] = False
            events.append(Event("tensor", kind, j, w, start, clock.now))
            clock.signal(("done", kind, w, j))
            if kind == "gemm_pv":
                clock.signal(("free", load_index[(w, j)]))
            start_next_gemm()

        clock.at(clock.now + params.t_gemm, finish)

    turns = {"sync": [0] * n_wg, "arrive": [0] * n_wg}
    clock.signal(("turn", 0, 0))

    def consumer(w, program):
        for op, j in program:
            if op == "gemm_qk":
                yield _Wait(("loaded", w, j))
            if op in GEMM_OPS:
                queue.append((op, w, j))
                start_next_gemm()
            elif op == "wait_qk":
                yield _Wait(("done", "gemm_qk", w, j))
            elif op == "wait_pv":
                yield _Wait(("done", "gemm_pv", w, j))
            elif op == "softmax":
                start = clock.now
                yield _Delay(params.t_softmax)
                events.append(Event("softmax", "softmax", j, w, start, clock.now))
            elif op == "sync":
                yield _Wait(("turn", w, turns["sync"][w]))
                turns["sync"][w] += 1
            elif op == "arrive":
                r = turns["arrive"][w]
                turns["arrive"][w] += 1
                clock.signal(("turn", (w + 1) % n_wg, r if w + 1 < n_wg else r + 1))

    clock.spawn("producer", producer())
    for w, program in enumerate(programs):
        clock.spawn(f"warpgroup {w}", consumer(w, program))
    clock.run()
    if clock.blocked:
        stuck = "; ".join(f"{name} ждёт {signal}" for name, signal in sorted(clock.blocked.items()))
        raise ScheduleError(f"взаимная блокировка (deadlock): {stuck}. Если ждут загрузку, а producer — "
                            "свободную ячейку, кольцу не хватает ячеек для этой программы")
    events.sort(key=lambda e: (e.start, e.end, e.unit, e.warpgroup, e.tile))
    return Trace(tuple(events), params, n_wg)


def run_sequential(params: Params) -> Trace:
    """One warpgroup, no overlap inside it; the ring of ``params.stages`` overlaps loads with compute."""
    return simulate(sequential_program(params.n_tiles), params)


def run_pingpong(params: Params, warpgroups: int = 2, barriers: bool = True) -> Trace:
    return simulate(pingpong_programs(params.n_tiles, warpgroups, barriers), params)


# --- pictures ---------------------------------------------------------------------------------

COLOURS = {"load": "#9e9e9e", "gemm_qk": "#1f77b4", "gemm_pv": "#2ca02c", "softmax": "#ff7f0e",
           "compute": "#8c564b"}
LABELS = {"load": "загрузка K_j, V_j", "gemm_qk": "S = Q K_j^T", "gemm_pv": "O += P V_j",
          "softmax": "softmax (exp)", "compute": "вычисление блока"}


def lane(event: Event) -> str:
    if event.unit == "tma":
        return "TMA (producer)"
    if event.unit == "tensor":
        return "тензорные ядра"
    if event.unit == "softmax":
        return f"WG{event.warpgroup}: softmax"
    return event.unit


def plot_gantt(events: Iterable[Event], *, ax=None, title: str | None = None,
               xlabel: str = "виртуальное время", xmax: float | None = None):
    """A Gantt chart of recorded events: one lane per unit, gaps are bubbles."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    events = list(events)
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 0.6 + 0.45 * len({lane(e) for e in events})))
    else:
        fig = ax.figure
    order = {"TMA (producer)": 0, "тензорные ядра": 1}
    first_seen = list(dict.fromkeys(lane(e) for e in events))
    lanes = sorted(first_seen, key=lambda name: (order.get(name, 2), first_seen.index(name)))
    row = {name: i for i, name in enumerate(lanes)}
    multi = len({e.warpgroup for e in events}) > 1
    span = max((e.end for e in events), default=1.0) - min((e.start for e in events), default=0.0)
    for e in events:
        y = row[lane(e)]
        ax.barh(y, e.duration, left=e.start, height=0.7, color=COLOURS.get(e.kind, "#bbbbbb"),
                edgecolor="black", linewidth=0.4, hatch="//" if multi and e.warpgroup % 2 else None)
        if e.duration > span / 60:
            label = str(e.tile) if not multi or e.unit == "softmax" else f"{e.tile}·{e.warpgroup}"
            ax.text(e.start + e.duration / 2, y, label, ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if xmax is not None:
        ax.set_xlim(0, xmax)
    if title:
        ax.set_title(title, fontsize=10)
    kinds = [k for k in COLOURS if any(e.kind == k for e in events)]
    ax.legend(handles=[Patch(color=COLOURS[k], label=LABELS[k]) for k in kinds], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_traces(traces: dict[str, Trace], *, xlabel: str = "виртуальное время"):
    """Several schedules one above the other, on one time axis."""
    import matplotlib.pyplot as plt

    heights = [0.8 + 0.45 * len({lane(e) for e in t.events}) for t in traces.values()]
    fig, axes = plt.subplots(len(traces), 1, figsize=(10, sum(heights)), sharex=True,
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    xmax = max(t.makespan for t in traces.values()) * 1.02
    for ax, (name, trace) in zip(axes[:, 0], traces.items()):
        plot_gantt(trace.events, ax=ax, xmax=xmax, xlabel=xlabel,
                   title=f"{name}: makespan {trace.makespan:g}, "
                         f"загрузка тензорных ядер {100 * trace.utilisation('tensor'):.0f} %")
    fig.tight_layout()
    return fig
