"""The multi-process runtime's start-up: `jax.distributed.initialize` with a bounded, clear
error when the coordinator cannot be reached (JAX itself aborts the process)."""

import socket
import time
from typing import Optional

import jax


class DistributedError(RuntimeError):
  """The multi-process runtime could not be set up."""


def _wait_for_coordinator(address: str, timeout_s: float) -> None:
  """Polls the coordinator's TCP port; DistributedError naming it after `timeout_s`.

  JAX aborts the whole process (a fatal C++ check, no Python exception) when it cannot reach
  the coordinator, so reachability is checked here first to give a clear, bounded error.
  """
  host, _, port = address.rpartition(':')
  if not host or not port.isdigit():
    raise DistributedError(f'coordinator address {address!r} is not HOST:PORT')
  deadline = time.monotonic() + timeout_s
  while True:
    try:
      with socket.create_connection((host.strip('[]'), int(port)), timeout=2.0):
        return
    except OSError as e:
      if time.monotonic() >= deadline:
        raise DistributedError(f'could not reach the coordinator at {address} within '
                               f'{timeout_s:g} s ({e.strerror or e}); is process 0 running '
                               'and is the address right?') from None
      time.sleep(0.5)


def initialize_distributed(coordinator_address: Optional[str] = None,
                           num_processes: Optional[int] = None,
                           process_id: Optional[int] = None, *, timeout_s: float = 300.0) -> None:
  """`jax.distributed.initialize`, with a bounded, clear error when the coordinator is away.

  With no arguments JAX detects the cluster (TPU pods, SLURM, Open MPI, ...). On CPU the
  collectives go through gloo, so several processes on one machine form one mesh.
  """
  if (num_processes is not None and process_id is not None
      and not 0 <= process_id < num_processes):
    raise ValueError(f'initialize_distributed: process_id={process_id} is outside '
                     f'[0, num_processes={num_processes})')
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  if coordinator_address and process_id:
    _wait_for_coordinator(coordinator_address, timeout_s)
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id,
                             initialization_timeout=int(max(timeout_s, 1)))
