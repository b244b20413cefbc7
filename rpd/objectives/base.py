"""The objective interface every method runs on.

Parameters live in one flat vector x of size D, cut into S contiguous blocks (one per pipeline
stage). The stale core only ever needs three things from an objective: the minibatch loss and
gradient at a (mixed) point, the full objective for evaluation, and the block layout.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import numpy as np

from rpd.runtime.programs import name_of


def on_device(a, dtype=None) -> jax.Array:
    """A host array (or anything ``np.asarray`` takes) on the default device, as ``dtype``: a
    transfer. ``jnp.asarray`` of a NumPy array compiles a small XLA program for every new shape
    in JAX 0.10 (≈ 15 ms each), which ``jax.device_put`` does not."""
    return jax.device_put(np.asarray(a, dtype))


@dataclasses.dataclass(frozen=True, eq=False)
class BlockLayout:
    """Contiguous blocks of a flat vector: block s is ``x[offsets[s] : offsets[s] + sizes[s]]``."""

    sizes: tuple[int, ...]

    @property
    def S(self) -> int:
        return len(self.sizes)

    @property
    def D(self) -> int:
        return int(sum(self.sizes))

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(int(o) for o in np.concatenate([[0], np.cumsum(self.sizes)[:-1]]))

    @property
    def segment_ids(self) -> np.ndarray:
        """int32 [D]: the block each coordinate belongs to."""
        return np.repeat(np.arange(self.S, dtype=np.int32), self.sizes)

    @classmethod
    def even(cls, D: int, S: int) -> "BlockLayout":
        """docs/science.md#model-and-words: sizes floor(D/S), the first D mod S blocks one larger."""
        base, extra = divmod(D, S)
        return cls(tuple(base + (1 if s < extra else 0) for s in range(S)))


@dataclasses.dataclass(frozen=True, eq=False)
class Objective:
    """A stochastic objective f(x) = mean_b f(x; batch b) split into S pipeline blocks.

    Functions are pure and take the objective's arrays explicitly as ``data`` (a pytree), so
    that jitted runs receive the data as arguments instead of baking it into the program as
    constants (which made compilation ~8x slower and recompiled for every new objective):

    - ``value_and_grad(data, x, b)``: minibatch loss f(x; b) and its gradient, shape [D], on
      dataset batch ``b`` (a traced int).
    - ``loss(data, x)``: what curves report: the full objective for the linear models (minus
      ``f_star`` gives f - f*), the held-out loss for the language model.

    x is a flat vector [D] of ``dtype``. Gradient noise (``grad_noise`` = std of i.i.d.
    Gaussian noise added to every computed block gradient) is added by the methods, which
    know which blocks a gradient updates. Hashable by identity, usable as a static argument.

    Compiled runs are cached on :attr:`program_key` (what the program computes), not on the
    object: ``x0``, ``f_star`` and ``grad_noise`` are passed to them as arguments like
    ``data``, and the builders give equal static parameters the same function objects, so a
    rebuilt objective, or one that differs only in its seed, reuses the compiled program.
    """

    name: str
    layout: BlockLayout
    n_batches: int
    x0: jax.Array  # [D], dtype
    data: Any  # pytree of arrays passed to value_and_grad / loss
    value_and_grad: Callable[[Any, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
    loss: Callable[[Any, jax.Array], jax.Array]
    f_star: float = 0.0
    L: float | None = None  # smoothness constant when known
    grad_noise: float = 0.0
    batch_size: int | None = None
    meta: dict = dataclasses.field(default_factory=dict)  # sizes and settings, for results/configs
    chain: Any = None  # rpd.objectives.chain.Chain: the stage structure, for two-point gradients

    @property
    def S(self) -> int:
        return self.layout.S

    @property
    def D(self) -> int:
        return self.layout.D

    @property
    def dtype(self):
        return self.x0.dtype

    @property
    def program_key(self) -> tuple:
        """What a compiled run of this objective depends on: its name, block sizes, number of
        batches, functions (by identity: the builders memoize them on their static
        parameters), the shapes and dtypes of ``data`` and ``x0``, and whether gradient noise
        is on. Numbers (``data``, ``x0``, ``f_star``, ``grad_noise``) are not part of it."""
        leaves, treedef = jax.tree.flatten(self.data)
        return (
            self.name,
            tuple(self.layout.sizes),
            int(self.n_batches),
            self.value_and_grad,
            self.loss,
            self.chain,
            treedef,
            tuple((tuple(np.shape(v)), str(v.dtype)) for v in leaves),
            tuple(np.shape(self.x0)),
            str(self.x0.dtype),
            bool(self.grad_noise > 0),
        )

    @property
    def program_id(self) -> str | None:
        """:attr:`program_key` in words that mean the same in every process (for
        :mod:`rpd.runtime.programs`' store), or None when a function has no stable name (it was not
        made by a :func:`rpd.runtime.programs.named_builder`)."""

        names = [name_of(f) for f in (self.value_and_grad, self.loss, self.chain)]
        if None in names:
            return None
        leaves, treedef = jax.tree.flatten(self.data)
        return repr(
            (
                self.name,
                tuple(self.layout.sizes),
                int(self.n_batches),
                *names,
                str(treedef),
                tuple(str(jax.typeof(v)) for v in leaves),
                str(jax.typeof(self.x0)),
                bool(self.grad_noise > 0),
            )
        )

    def program(self) -> Objective:
        """The objective as a compiled program sees it: every number removed (``x0`` a
        ShapeDtypeStruct, ``data`` / ``f_star`` / ``grad_noise`` / ``L`` / ``meta`` empty), so a
        program built from it can only read them from its arguments."""
        # the emptied fields hold no numbers, so not the types a runnable objective has
        emptied: dict[str, Any] = dict(
            x0=jax.ShapeDtypeStruct(np.shape(self.x0), self.x0.dtype),
            data=None,
            f_star=None,
            grad_noise=None,
            L=None,
            meta={},
        )
        return dataclasses.replace(self, **emptied)

    def constants(self) -> dict:
        """The numbers a compiled run takes besides ``data``: x0, f* and σ_g as arrays of ``dtype``."""
        return {
            "x0": on_device(self.x0, self.dtype),
            "f_star": on_device(self.f_star, self.dtype),
            "grad_noise": on_device(self.grad_noise, self.dtype),
        }

    def block(self, x: jax.Array, s: int) -> jax.Array:
        off = self.layout.offsets[s]
        return x[..., off : off + self.layout.sizes[s]]

    def full_loss(self, x: jax.Array) -> jax.Array:
        return self.loss(self.data, x)

    def full_grad(self, x: jax.Array) -> jax.Array:
        return self.full_grad_data(self.data, x)

    def full_grad_data(self, data, x: jax.Array) -> jax.Array:
        """Gradient of ``loss`` (the evaluated objective) with explicit data, for use under jit."""
        return jax.grad(self.loss, argnums=1)(data, x)


class ProgramKey:
    """An objective as a cache key for compiled programs: equal when the objectives'
    :attr:`Objective.program_key` are equal. ``obj`` is the first such objective's
    :meth:`Objective.program` (no numbers), which is what a program may be built from,
    ``noisy`` whether it adds gradient noise, and ``id`` its :attr:`Objective.program_id`."""

    __slots__ = ("_hash", "id", "key", "noisy", "obj")

    def __init__(self, obj: Objective):
        self.key = obj.program_key
        self.id = obj.program_id
        self.obj = obj.program()
        self.noisy = bool(obj.grad_noise > 0)
        self._hash = hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, ProgramKey) and self.key == other.key

    def __hash__(self) -> int:
        return self._hash
