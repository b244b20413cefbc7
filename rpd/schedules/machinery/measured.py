"""Event-time replay of a program of ops at measured (float) durations (docs/replay.md#the-dependency-model).

A *program* is a set of slots (ops), each on one stream (a worker's compute stream, its
data-parallel stream, ...), run in order on its stream. A slot starts when the previous slot of
its stream has ended and every slot it depends on has ended plus that edge's latency:

    start(x) = max(end(prev(x)), max_{(y, l) in deps(x)} end(y) + l)

A slot of a rendezvous group (a p2p pair, a collective) ends when every member has started,
plus its own transfer time; any other slot ends its duration after its start:

    end(x) = max_{y in group(x)} start(y) + d(x)        end(x) = start(x) + d(x)

This is the simulator of Lin et al. (OSDI '25), ``ByteDance-Seed/StragglerAnalysis``
``analyzer/simulator.py`` (``simulate``: a topological pass where a communication group ends at
its members' latest start plus the transfer duration), written here as one fixed evaluation order
found once per program (:func:`evaluation_order`) and replayed for a whole batch of duration
vectors at once (every step, every what-if), NumPy over the batch axis.

Float durations, not rpd's integer ticks (:mod:`rpd.schedules.machinery.costs`): a measured
trace gives every op its own duration in seconds (µs resolution, float32 in the artifact), and
the replay only adds and takes maxima, so float64 is exact to ~1e-16 relative, far below the
trace's own resolution; ticks of 1 µs would give the same times (docs/science.md#simulated-time-at-events) with an O(ops) pass
either way.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np


@dataclasses.dataclass(frozen=True)
class Program:
    """Slots of a replay: ``stream`` [n] (int), ``group`` [n] (rendezvous group id, -1: none),
    and data edges ``dep_src -> dep_dst`` [e] with latency column ``dep_lat`` [e] (an index
    into the latency rows passed to :func:`replay`, -1: no latency). Slots of one stream run in
    their index order."""

    stream: np.ndarray
    group: np.ndarray
    dep_src: np.ndarray
    dep_dst: np.ndarray
    dep_lat: np.ndarray

    @property
    def n(self) -> int:
        return len(self.stream)


# node kinds of the evaluation order
START, GROUP, END = 0, 1, 2


def evaluation_order(p: Program) -> list[tuple[int, int]]:
    """The (kind, index) nodes of ``p`` in an order where each is computed after what it reads:
    START of slot x after END of its stream predecessor and of its data sources; GROUP g after
    START of every member; END x after GROUP(x) (or START x). Raises ValueError naming a slot
    when the program deadlocks (a rendezvous no order can reach)."""
    n = p.n
    groups = np.unique(p.group[p.group >= 0])
    gindex = {int(g): i for i, g in enumerate(groups)}
    n_nodes = 2 * n + len(groups)  # START 0..n-1, END n..2n-1, GROUP 2n..
    succ: list[list[int]] = [[] for _ in range(n_nodes)]
    indeg = np.zeros(n_nodes, np.int64)

    def edge(a: int, b: int) -> None:
        succ[a].append(b)
        indeg[b] += 1

    last: dict[int, int] = {}
    for x in range(n):
        s = int(p.stream[x])
        if s in last:
            edge(n + last[s], x)
        last[s] = x
        g = int(p.group[x])
        if g >= 0:
            edge(x, 2 * n + gindex[g])
            edge(2 * n + gindex[g], n + x)
        else:
            edge(x, n + x)
    for a, b in zip(p.dep_src.tolist(), p.dep_dst.tolist(), strict=True):
        edge(n + a, b)
    queue = deque(int(i) for i in np.nonzero(indeg == 0)[0])
    order: list[tuple[int, int]] = []
    while queue:
        v = queue.popleft()
        order.append((START, v) if v < n else (END, v - n) if v < 2 * n else (GROUP, int(groups[v - 2 * n])))
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    if len(order) != n_nodes:
        stuck = int(np.nonzero(indeg[:n] > 0)[0][0]) if (indeg[:n] > 0).any() else 0
        raise ValueError(f"program deadlocks: slot {stuck} (stream {int(p.stream[stuck])}) can never start")
    return order


def replay(
    p: Program, duration: np.ndarray, latency: np.ndarray | None = None, order=None
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end times [n, B] of every slot for ``duration`` [n, B] (B: a batch of
    independent replays, e.g. steps × what-ifs), every stream starting at 0; ``latency``
    [k, B] holds the rows ``dep_lat`` indexes. Equations in the module docstring."""
    order = evaluation_order(p) if order is None else order
    n, B = duration.shape
    start = np.zeros((n, B))
    end = np.zeros((n, B))
    gstart: dict[int, np.ndarray] = {}
    prev = np.full(n, -1, np.int64)
    last: dict[int, int] = {}
    for x in range(n):
        s = int(p.stream[x])
        prev[x] = last.get(s, -1)
        last[s] = x
    deps_in: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for a, b, lat in zip(p.dep_src.tolist(), p.dep_dst.tolist(), p.dep_lat.tolist(), strict=True):
        deps_in[b].append((a, lat))
    members: dict[int, list[int]] = {}
    for x, g in enumerate(p.group.tolist()):
        if g >= 0:
            members.setdefault(g, []).append(x)
    zero = np.zeros(B)
    for kind, i in order:
        if kind == START:
            t = end[prev[i]] if prev[i] >= 0 else zero
            for a, lat in deps_in[i]:
                t = np.maximum(t, end[a] + (latency[lat] if lat >= 0 and latency is not None else 0.0))
            start[i] = t
        elif kind == GROUP:
            gstart[i] = start[members[i]].max(axis=0)
        else:
            g = int(p.group[i])
            end[i] = (gstart[g] if g >= 0 else start[i]) + duration[i]
    return start, end
