"""Distributed data parallel for one cell: several processes (GPUs, or CPU processes with
gloo) train one cell together under ``torchrun``, and give the numbers one process would.

How the work is split. Every rank builds the same *global* batch (the batch order depends
only on the seed and epoch) and runs the method's ``training_step`` on it, but the
backbone's heavy calls (:meth:`~cirbench.backbones.base.Backbone.compose` and
``encode_image_tokens``) are sharded: each rank runs the composer on its contiguous slice
of the rows and the outputs are all-gathered, with gradients, back into the global batch
(:func:`shard_backbone`). So a method's in-batch similarity matrices, its contrastive
losses, its per-sample noise scores and its partitions are computed over the global
batch, on every rank, with no change to the method: in-batch negatives span all ranks,
and purity covers the whole training set. Validation and epoch passes (TME's per-sample
losses) are sharded the same way. Work a method does outside the backbone (losses,
Sinkhorn, small heads) is repeated on every rank; it is small next to the composer.

Why the gradients are right. Every rank computes the same loss L. The gather's backward
sums the incoming gradients over ranks (all-reduce) and keeps the rank's own rows, so a
rank's composer gradient is ``W * dL/d(its rows)``; parameters used outside the backbone
get the full ``dL/dθ`` on every rank. :func:`average_gradients` then averages over the W
ranks, which gives exactly the one-process gradient ``dL/dθ`` for both kinds. (DDP's
module wrapper is not used: methods are not called through ``forward``, and one flat
all-reduce after ``backward`` is all the synchronisation this scheme needs.)

Dropout inside a shard draws from a per-rank generator (:func:`_shard_rng`), so the
global random stream, which methods use for things like random images, stays identical
on all ranks whatever the shard sizes. Results are written by rank 0 only.

A failed cell. Under ``torchrun``, a cell that fails on one rank fails on every rank, the
same way.

Without this, a rank whose method raises records the failure and moves on to the next cell
while the other ranks are still inside the failed cell's collectives; the next cell's first
collective then meets a different one on the other side, and gloo aborts both processes.

The protocol, run by :func:`settle_failure` on every rank whose cell raised:

1. The rank counts itself in an atomic counter of the job's key-value store; the first
   rank to do so is the *origin* of the failure (the others failed because of it).
2. It leaves the process group. That breaks the collectives the other ranks are waiting in
   (gloo: "Connection closed by peer" within milliseconds), so they raise and run the same
   protocol.
3. Every rank joins a fresh process group over the same store (a new key prefix per
   failure, so no stale rendezvous key is read) and all ranks exchange their errors.
4. Every rank returns the same error text: the origin's traceback, with one line per other
   rank. Rank 0 records the cell as failed once; every rank goes on to the next cell.

:func:`confirm_cell` is the collective that closes a cell's work on every rank: a rank
whose peer failed after it finished its own work learns it there.

With NCCL, leaving the group does not interrupt the other ranks' kernels: they see the
failure at the process group's timeout (``init_distributed``'s 30 minutes) instead.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import os
import socket
import traceback
import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from cirbench.backbones.base import Backbone, ComposerOutput, TextBatch


@dataclass(frozen=True)
class DistEnv:
    """This process's place in a ``torchrun`` job (world size 1 when not launched by it)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        """True when more than one process trains the cell."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0."""
        return self.rank == 0


def env_from_torchrun() -> DistEnv:
    """Read ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` as ``torchrun`` (or
    ``submitit.helpers.TorchDistributedEnvironment().export()``) sets them."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as exc:
        raise RuntimeError(f"malformed torchrun environment (RANK/WORLD_SIZE/LOCAL_RANK): {exc}") from None
    if not 0 <= rank < world:
        raise RuntimeError(f"torchrun environment: RANK={rank} is outside WORLD_SIZE={world}")
    return DistEnv(rank, world, local)


def init_distributed(device: str = "cpu", timeout_minutes: float = 30.0) -> tuple[DistEnv, str]:
    """Join the ``torchrun`` process group if there is one; return the environment and this
    rank's device (``cuda`` becomes ``cuda:<LOCAL_RANK>``). NCCL on GPUs, gloo on the CPU."""
    env = env_from_torchrun()
    if not env.enabled:
        return env, device
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device {device}: CUDA is not available on this machine")
        device = f"cuda:{env.local_rank}" if device == "cuda" else device
        torch.cuda.set_device(torch.device(device))
    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, timeout=dt.timedelta(minutes=timeout_minutes))
        atexit.register(shutdown)
    return env, device


def is_distributed() -> bool:
    """True inside an initialised process group of more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 when not distributed)."""
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of ranks (1 when not distributed)."""
    return dist.get_world_size() if is_distributed() else 1


def is_main_process() -> bool:
    """True on rank 0, the only rank that writes results and caches."""
    return rank() == 0


def shutdown() -> None:
    """Leave the process group (if this process joined one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(value: object) -> object:
    """Rank 0's ``value`` on every rank (``value`` itself when not distributed)."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    """Wait for every rank (a no-op when not distributed)."""
    if is_distributed():
        dist.barrier()


@contextlib.contextmanager
def main_process_first() -> Iterator[None]:
    """Rank 0 runs the block first (e.g. builds a cache), then the others (which read it)."""
    if not is_main_process():
        barrier()
    try:
        yield
    finally:
        if is_main_process():
            barrier()


def shard_range(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of rank ``rank`` when ``n`` rows are split into ``world``
    contiguous, near-equal shards (the first ``n % world`` shards get one row more)."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class _GatherRows(torch.autograd.Function):
    """All-gather of row shards of unequal sizes; backward sums over ranks, keeps own rows."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, total: int) -> torch.Tensor:  # type: ignore[override]
        world, me = dist.get_world_size(), dist.get_rank()
        bounds = [shard_range(total, r, world) for r in range(world)]
        width = max(stop - start for start, stop in bounds)
        padded = local.new_zeros((width, *local.shape[1:]))
        padded[: local.shape[0]] = local
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded)
        ctx.own = bounds[me]
        return torch.cat([part[: stop - start] for part, (start, stop) in zip(parts, bounds)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        start, stop = ctx.own
        return grad[start:stop], None


def gather_rows(local: torch.Tensor, total: int) -> torch.Tensor:
    """This rank's rows (its :func:`shard_range` of ``total``) -> all ``total`` rows, in
    rank order, differentiable (see the module docstring for the gradient)."""
    return _GatherRows.apply(local.contiguous(), total)


@contextlib.contextmanager
def _shard_rng(counter: int) -> Iterator[None]:
    """A per-rank, per-call random stream that leaves the global one untouched."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    seed = zlib.crc32(np.array([torch.initial_seed() % 2**62, counter, rank()], dtype=np.int64).tobytes())
    with torch.random.fork_rng(devices=devices):
        torch.random.default_generator.manual_seed(seed)
        if devices:
            torch.cuda.manual_seed(seed)
        yield


def shard_backbone(backbone: Backbone) -> None:
    """Make ``backbone``'s ``compose`` and ``encode_image_tokens`` row-sharded across ranks
    and all-gathered (in place, on this instance only). Calls with fewer rows than ranks
    run whole on every rank. Idempotent; a no-op when not distributed."""
    if not is_distributed() or getattr(backbone, "_cirbench_sharded", False):
        return
    compose, encode = backbone.compose, backbone.encode_image_tokens
    calls = iter(range(1 << 62))

    def rows(tensor: torch.Tensor | None, start: int, stop: int, n: int) -> torch.Tensor | None:
        return tensor[start:stop] if tensor is not None and tensor.dim() == 3 and tensor.shape[0] == n else tensor

    def sharded_compose(
        image_tokens: torch.Tensor | None, text: TextBatch | None, queries: torch.Tensor | None = None
    ) -> ComposerOutput:
        n = (image_tokens if image_tokens is not None else text.ids).shape[0]  # type: ignore[union-attr]
        if n < world_size():
            return compose(image_tokens, text, queries)
        start, stop = shard_range(n, rank(), world_size())
        local_text = None if text is None else TextBatch(text.ids[start:stop], text.mask[start:stop])
        with _shard_rng(next(calls)):
            out = compose(rows(image_tokens, start, stop, n), local_text, rows(queries, start, stop, n))
        return ComposerOutput(gather_rows(out.query, n), None if out.text is None else gather_rows(out.text, n))

    def sharded_encode(pixels: torch.Tensor) -> torch.Tensor:
        n = pixels.shape[0]
        if n < world_size():
            return encode(pixels)
        start, stop = shard_range(n, rank(), world_size())
        with torch.no_grad():
            return gather_rows(encode(pixels[start:stop]), n)

    backbone.compose = sharded_compose  # type: ignore[method-assign]
    backbone.encode_image_tokens = sharded_encode  # type: ignore[method-assign]
    backbone._cirbench_sharded = True


def broadcast_parameters(module: nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank (a no-op when not distributed)."""
    if not is_distributed():
        return
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)


def average_gradients(parameters: Iterable[nn.Parameter]) -> None:
    """Average the gradients of ``parameters`` over ranks with one all-reduce per dtype.
    A parameter without a gradient on every rank keeps none (so the optimiser skips it, as
    it would in one process); one with a gradient on some ranks only counts zero on the
    others. A no-op when not distributed."""
    if not is_distributed():
        return
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    has_grad = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=params[0].device)
    dist.all_reduce(has_grad, op=dist.ReduceOp.MAX)
    groups: dict[tuple[torch.device, torch.dtype], list[nn.Parameter]] = {}
    for p, flag in zip(params, has_grad.tolist()):
        if flag:
            groups.setdefault((p.device, p.dtype), []).append(p)
    world = world_size()
    for group in groups.values():
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in group])
        dist.all_reduce(flat)
        flat /= world
        offset = 0
        for p in group:
            p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()


def check_same_on_all_ranks(values: np.ndarray, what: str, atol: float = 1e-4) -> None:
    """Raise if ``values`` (e.g. an epoch's noise scores or a batch order) differ between
    ranks: the ranks would then be training on different data. NaNs compare equal."""
    if not is_distributed():
        return
    local = np.asarray(values, dtype=np.float64)
    parts: list[np.ndarray | None] = [None] * world_size()
    dist.all_gather_object(parts, local)
    for r, part in enumerate(parts):
        if part is None or part.shape != local.shape or not np.allclose(part, local, atol=atol, rtol=0, equal_nan=True):
            raise RuntimeError(f"{what} differ between rank {rank()} and rank {r}; every rank must use the same seed and data")


DEFAULT_TIMEOUT = dt.timedelta(minutes=30)
_failures = 0  # failures settled so far; the same count on every rank


def _error_text(exc: BaseException) -> tuple[str, str]:
    """(one line ``Type: message``, the formatted traceback) of an exception."""
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def confirm_cell() -> None:
    """Wait until every rank has finished the cell's work; raises if a rank failed and broke
    the process group (a no-op in one process)."""
    if not is_distributed():
        return
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    dist.all_reduce(torch.zeros(1, device=device))


def _sever_peer_connections() -> int:
    """Shut down this process's TCP connections to the other ranks (gloo's pairs), keeping
    the key-value store's (``MASTER_PORT``, either end). Leaving the process group is not
    enough: while anything still references it, its sockets stay open and the peers keep
    waiting. Returns the number of connections shut down (0 where ``/proc/self/fd`` and
    ``/dev/fd`` are both missing)."""
    store_port = int(os.environ.get("MASTER_PORT", "-1"))
    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    severed = 0
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue  # not a socket, or already closed
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                ports = (sock.getsockname()[1], sock.getpeername()[1])  # a listener has no peer: OSError
                if store_port not in ports:
                    sock.shutdown(socket.SHUT_RDWR)
                    severed += 1
        except OSError:
            pass
        finally:
            sock.close()
    return severed


def _rebuild_group(store: dist.Store, backend: str, rank: int, world: int, timeout: dt.timedelta) -> None:
    """Leave the current process group, breaking the peers' pending collectives, and join a
    fresh one with the same ranks over ``store``."""
    global _failures
    if backend == "gloo":
        _sever_peer_connections()
    dist.destroy_process_group()
    _failures += 1
    prefixed = dist.PrefixStore(f"cirbench/group-{_failures}/", store)
    dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world, timeout=timeout)


def settle_failure(exc: BaseException) -> tuple[str, str]:
    """Turn a cell's exception on this rank into the decision every rank shares.

    Returns ``(summary, error)``: a one-line summary and the text to record (the traceback
    of the rank where the failure started; under torchrun followed by what every other rank
    saw). In one process that is just this exception's. Must be called on every rank whose
    cell raised, which under torchrun is every rank (the protocol: the module docstring)."""
    summary, text = _error_text(exc)
    if not is_distributed():
        return summary, text
    from torch.distributed.distributed_c10d import _get_default_store

    store = _get_default_store()
    rank, world, backend = dist.get_rank(), dist.get_world_size(), dist.get_backend()
    origin = store.add(f"cirbench/cell-failure-{_failures}", 1) == 1
    _rebuild_group(store, backend, rank, world, DEFAULT_TIMEOUT)
    reports: list[tuple[bool, str, str] | None] = [None] * world
    dist.all_gather_object(reports, (origin, summary, text))
    first = next((r for r, report in enumerate(reports) if report and report[0]), 0)
    _, first_summary, first_text = reports[first]  # type: ignore[misc]
    others = "; ".join(f"rank {r}: {report[1]}" for r, report in enumerate(reports) if r != first and report)
    # the origin's traceback last, so that its last line (what the report shows) is the cause
    return f"rank {first}: {first_summary}", f"failed on rank {first} of {world} (then {others})\n{first_text}"
