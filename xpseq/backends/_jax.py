"""JAX: ``jax.jit``, ``jax.value_and_grad`` and ``lax.scan``.

The backend leaves JAX's configuration as it finds it. JAX computes in 64 bits only in its
64-bit mode, a switch for the whole process that belongs to the caller:
``jax.config.update("jax_enable_x64", True)``, before JAX creates any array (the ``xpseq``
command and the test suite turn it on). Without it float32 works as on every backend,
integer arrays become JAX's ``int32`` (their values checked to fit), and asking for
float64 or int64 (``dtype="float64"``, a float64 array, Python floats with ``dtype=None``)
raises an error that says how to turn the mode on, where JAX itself would silently give
32 bits.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ._base import CAPABILITIES, Backend


class JaxBackend(Backend):
    name = "jax"
    capabilities = CAPABILITIES["jax"]

    def __init__(self, device: Any = None) -> None:
        import jax
        import jax.numpy as jnp

        self._jax = jax
        super().__init__(jnp, device=device)
        if device is not None and not isinstance(device, (str, jax.Device)):
            raise TypeError(f"backends.get('jax', device=...): expected a jax.Device or a "
                            f"string such as 'cpu' or 'gpu:0', got {type(device).__name__}")
        # jnp.float64 is a scalar type; arrays carry NumPy dtypes, so compare with those.
        self._dtypes = {n: np.dtype(n) for n in self._dtypes}

    @property
    def device(self) -> Any:
        """The ``jax.Device`` arrays are placed on, found when first asked for (asking JAX
        for its devices starts its runtime, which a multi-process run must first join)."""
        if not isinstance(self._device, self._jax.Device):
            self._device = _jax_device(self._jax, self._device)
        return self._device

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self._jax.Array)

    def x64(self) -> bool:
        """Whether JAX's 64-bit mode is on (``jax.config.jax_enable_x64``)."""
        return bool(getattr(self._jax.config, "jax_enable_x64"))     # a dynamic option

    def _default_dtype(self, host_dtype: np.dtype) -> Any:
        if host_dtype.kind in "iu" and not self.x64():
            return self._dtypes["int32"]                 # JAX's own integer default
        return super()._default_dtype(host_dtype)

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        if np.dtype(dtype).itemsize == 8 and not self.x64():
            raise RuntimeError(
                f"jax.asarray: {np.dtype(dtype)} needs JAX's 64-bit mode, which is off (JAX "
                "would silently give 32 bits); turn it on before JAX creates arrays: "
                'jax.config.update("jax_enable_x64", True), or ask for float32')
        if host.dtype.kind in "iu" and np.dtype(dtype) == np.int32 and host.size \
                and host.dtype.itemsize > 4 and not (
                    np.iinfo(np.int32).min <= host.min() and host.max() <= np.iinfo(np.int32).max):
            raise ValueError(
                f"jax.asarray: the integers span [{host.min()}, {host.max()}], beyond int32; "
                'int64 needs JAX\'s 64-bit mode: jax.config.update("jax_enable_x64", True)')
        # Committed to the backend's device (by default this process's first), like the
        # outputs of a jitted function: a jitted step fed its own outputs then reuses its
        # first compilation instead of compiling a second time for "uncommitted" inputs.
        return self._jax.device_put(self.xp.asarray(host, dtype=dtype), self.device)

    def dropout_keep(self, seed: int, step: Any, shape: tuple[int, ...], rate: float,
                     stream: int = 0) -> Any:
        """``jax.random.bernoulli`` with the key ``fold_in(key(seed), step)`` (then
        ``fold_in(·, stream)`` for ``stream > 0``); seed and step may be traced, so it is
        drawn inside ``jax.jit`` without recompiling for a new seed."""
        random = self._jax.random
        as_uint = lambda x: self.xp.asarray(x, dtype=self.xp.uint32)  # noqa: E731 (traceable)
        key = random.fold_in(random.key(as_uint(seed)), as_uint(step))
        if stream:
            key = random.fold_in(key, stream)
        return random.bernoulli(key, 1.0 - rate, shape)

    def value_and_grad(self, fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
                       has_aux: bool = False) -> Callable[..., Any]:
        return self._jax.value_and_grad(fn, argnums=argnums, has_aux=has_aux)

    def compile_program(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        """``jax.jit(fn, **kwargs)`` (e.g. ``static_argnames=``)."""
        return self._jax.jit(fn, **kwargs)

    def graphs(self, traces: int, pieces: Sequence[Any] = ()) -> int | None:
        """One compiled program per trace (a new input shape)."""
        return traces

    def scan(self, fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any,
             length: int | None = None, reverse: bool = False,
             span: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
        """``lax.scan``; with ``span=(start, stop)`` a ``lax.fori_loop`` over the
        ``stop - start`` steps of the span, a trip count known only at run time (one
        compiled program for every span), writing each ``y`` into place in a
        zero-filled buffer of all ``T`` steps (see :meth:`Backend.scan`)."""
        lax = self._jax.lax
        steps = {int(leaf.shape[0]) for leaf in self._jax.tree_util.tree_leaves(xs)}
        if span is None or steps == {0} or (length is not None and not steps):
            return lax.scan(fn, carry, xs, length=length, reverse=reverse)
        tree_map, jnp = self._jax.tree_util.tree_map, self._jax.numpy
        if length is not None:
            steps.add(int(length))
        if len(steps) != 1:
            raise ValueError(f"scan: xs leaves and length disagree on the number of steps: "
                             f"{sorted(steps)}")
        (n,) = steps
        start = jnp.clip(jnp.asarray(span[0], dtype=jnp.int32), 0, n)
        stop = jnp.clip(jnp.asarray(span[1], dtype=jnp.int32), start, n)

        def x_at(t: Any) -> Any:
            return tree_map(lambda a: lax.dynamic_index_in_dim(a, t, keepdims=False), xs)

        y_shapes = self._jax.eval_shape(fn, carry, x_at(0))[1]
        ys0 = tree_map(lambda s: jnp.zeros((n, *s.shape), s.dtype), y_shapes)

        def body(i: Any, state: tuple[Any, Any]) -> tuple[Any, Any]:
            c, ys = state
            t = stop - 1 - i if reverse else start + i
            c, y = fn(c, x_at(t))
            return c, tree_map(lambda buf, v: lax.dynamic_update_index_in_dim(buf, v, t, 0),
                               ys, y)

        return tuple(lax.fori_loop(0, stop - start, body, (carry, ys0)))

    def join_processes(self, coordinator: str, processes: int, process_id: int) -> None:
        """Make this process one of ``processes`` JAX processes (``jax.distributed.initialize``
        with ``coordinator``, ``"HOST:PORT"`` of process 0): ``jax.devices()`` then lists
        every process's devices, and a mesh over them spans the machines. Call it before
        anything else uses JAX. CPU devices talk through gloo."""
        jax = self._jax
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=processes,
                                   process_id=process_id)

    def process_group(self) -> tuple[int, int] | None:
        """``(process index, process count)`` when JAX runs as several processes
        (:meth:`join_processes`), ``None`` for one."""
        jax = self._jax
        return None if jax.process_count() == 1 else (jax.process_index(), jax.process_count())

    def broadcast(self, obj: Any) -> Any:
        """Process 0's ``obj`` (anything JSON can write) on every JAX process."""
        import json

        from jax.experimental import multihost_utils

        data = np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)
        size = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
        buffer = np.zeros(size, dtype=np.uint8)
        buffer[:min(size, data.size)] = data[:size]
        return json.loads(bytes(np.asarray(multihost_utils.broadcast_one_to_all(buffer))))

    def mesh(self, devices: int) -> Any:
        """A one-axis :class:`jax.sharding.Mesh` (axis ``"batch"``) over the first
        ``devices`` of ``jax.devices()``. On CPU the devices are the host's cores only
        when Python started with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
        (``xpseq train --devices N`` sets it before JAX starts)."""
        found = self._jax.devices()
        if devices > len(found):
            raise ValueError(
                f"devices={devices}, but JAX sees {len(found)} {found[0].platform} device(s); "
                f"on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count={devices} "
                "before JAX starts (xpseq train --devices does)")
        return self._jax.sharding.Mesh(np.array(found[:devices]), ("batch",))

    def put(self, tree: Any, mesh: Any, *, split: bool) -> Any:
        """``tree``'s arrays (NumPy or JAX) placed on ``mesh``: axis 0 split evenly over its
        devices (``split=True``; axis 0 must divide) or replicated on each."""
        sharding = self._jax.sharding
        spec = sharding.PartitionSpec("batch") if split else sharding.PartitionSpec()
        return self._jax.device_put(tree, sharding.NamedSharding(mesh, spec))

    def data_parallel(self, grad_fn: Callable[..., tuple[Any, Any]], mesh: Any,
                      pad_id: int) -> Callable[..., tuple[Any, Any]]:
        """``grad_fn(params, batch, keep) -> (mean loss, grads)`` run by each device of
        ``mesh`` on its rows of ``batch`` and ``keep`` (``jax.shard_map``; the parameters
        replicated), then each device's value and gradients weighted by its share of the
        batch's real target tokens (``tgt_out != pad_id``) and summed over the mesh (one
        ``psum``): the whole batch's mean loss and its gradient. Left to itself, XLA's
        partitioner sums each step's weight gradient across the devices inside the backward
        loops, a collective per time step. (``check_vma=False``: the models' scans start
        from carries that JAX's replication check does not know to be per-device.)"""
        jax = self._jax
        spec, psum = jax.sharding.PartitionSpec, jax.lax.psum

        def local(params: Any, batch: Any, keep: Any) -> tuple[Any, Any]:
            value, grads = grad_fn(params, batch, keep)
            tokens = self.xp.sum(self.xp.astype(batch["tgt_out"] != pad_id, value.dtype))
            share = tokens / self.xp.maximum(psum(tokens, "batch"), 1.0)
            return psum((value * share, jax.tree.map(lambda g: g * share, grads)), "batch")

        def run(params: Any, batch: Any, keep: Any) -> tuple[Any, Any]:
            if keep is None:
                fn = jax.shard_map(lambda p, b: local(p, b, None), mesh=mesh,
                                   in_specs=(spec(), spec("batch")), out_specs=spec(),
                                   check_vma=False)
                return fn(params, batch)
            fn = jax.shard_map(local, mesh=mesh, in_specs=(spec(), spec("batch"), spec("batch")),
                               out_specs=spec(), check_vma=False)
            return fn(params, batch, keep)

        return run

    def custom_vjp(self, fn: Callable[..., Any], fwd: Callable[..., tuple[Any, Any]],
                   bwd: Callable[[Any, Any], tuple]) -> Callable[..., Any]:
        """``jax.custom_vjp(fn)`` with ``fwd`` and ``bwd`` attached: ``jax.grad`` (and
        ``jax.vjp``) run ``bwd``; ``jax.jvp`` through it raises (a custom VJP has no
        forward-mode derivative)."""
        wrapped = self._jax.custom_vjp(fn)
        wrapped.defvjp(fwd, bwd)
        return wrapped


def _jax_device(jax: Any, device: Any) -> Any:
    """The ``jax.Device`` that ``device`` names: ``None`` for this process's first device, a
    ``jax.Device``, or ``"PLATFORM"`` / ``"PLATFORM:INDEX"`` (``"cpu"``, ``"gpu:1"``)."""
    if device is None:
        return jax.local_devices()[0]
    platform, _, index = device.partition(":")
    try:
        found = jax.devices(platform)
    except RuntimeError:
        raise ValueError(f"backends.get('jax', device={device!r}): JAX has no {platform!r} "
                         "devices here") from None
    if not index:
        return found[0]
    if not index.isdigit() or int(index) >= len(found):
        raise ValueError(f"backends.get('jax', device={device!r}): JAX sees {len(found)} "
                         f"{platform} device(s), numbered from 0")
    return found[int(index)]
