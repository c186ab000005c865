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
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import os
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
