"""Many processes, one run: rank and world size from the launcher (torchrun or accelerate), barriers through
torch.distributed. A process learns its place from the environment alone; torch is imported only where several
processes share a run, so the command line refuses a folder in use without it."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Place:
    """This process's rank among `world_size` processes, and its GPU index on its machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """True for the process that checks the run directory and writes the manifest."""
        return self.rank == 0


def place() -> Place:
    """This process's place, from the RANK / WORLD_SIZE / LOCAL_RANK variables torchrun and accelerate set."""
    env = os.environ
    return Place(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))


def device_for(device: str, where: Place) -> str:
    """One GPU per local rank when the run is spread over several processes."""
    if where.world_size > 1 and device in ("cuda", "auto"):
        import torch

        if torch.cuda.is_available():
            return f"cuda:{where.local_rank}"
    return device


def start(where: Place) -> None:
    """Join the process group (NCCL on GPUs, gloo on CPUs) when there is more than one process."""
    if where.world_size == 1:
        return
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(where.local_rank)
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")


def barrier(where: Place) -> None:
    """Wait for every process of the run."""
    if where.world_size > 1:
        import torch.distributed as dist

        dist.barrier()
