"""Under ``torchrun``, a cell that fails on one rank fails on every rank, the same way.

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

import datetime as dt
import os
import socket
import traceback

import torch
import torch.distributed as dist

from cirbench.engine.distributed import is_distributed

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
    cell raised, which under torchrun is every rank (see the module docstring)."""
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
