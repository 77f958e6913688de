"""The device check's stages (benchmarks/device/check.py runs them): each one's function, time
box on an accelerator and at the smoke size, and part (`--part` selects parts).

Parts 1-4 are the proof of issues 36, 42 and 44 (check.py's docstring). Part `sweep` (issue
55) tries, one stage each, the settings that could move the big model's MFU, then names the
fastest that keeps the numerics (benchmarks/device/sweep.py). Part `compile_peer` times the
torch.compile'd PyTorch peer against ours at base and big, in boxes its compile fits.
"""

import dataclasses
from typing import Any, Dict, Tuple, Union

Part = Union[int, str]


@dataclasses.dataclass(frozen=True)
class Stage:
  """One stage: `function` is 'module:name', called with a `Context`, returning a record."""
  name: str
  function: str
  box_s: float        # its time box on an accelerator (from the estimate beside it)
  smoke_box_s: float  # and with --smoke
  part: Part = 1
  # Stages with the PyTorch peer in the same process: JAX takes its memory as it needs it, up
  # to 60% of the device, instead of 75% up front, so the peer's allocator has the rest.
  shares_device: bool = False
  # Stages that run main.py in children start no backend themselves: a process holding the
  # device (JAX takes 75% of a GPU's memory when it starts) would starve the child's.
  starts_jax: bool = True
  xla_flags: str = ''  # added to XLA_FLAGS in the stage's process
  # The sweep's candidates (benchmarks/device/sweep.py): config changes, as (key, value) pairs.
  settings: Tuple[Tuple[str, Any], ...] = ()
  # A stage that only reads the run's records (a part's summary): started with its own box
  # even when the stages before it spent the budget.
  final: bool = False


# Numerics and forms are about what is computed, not how fast: without autotuning a GPU program
# compiles in seconds, not tens of seconds (other backends' XLA parses the flag too).
NO_AUTOTUNE = '--xla_gpu_autotune_level=0'
# Boxes in seconds, from the first GPU run (one H200, jax 0.11.2, empty compilation cache,
# 2026-11-27; docs/performance.md): what each stage measured there is the comment beside it.
# XLA's GPU compiles autotune and take 10-46 s a program there, which sets most boxes
# (tests/benchmarks/device/test_device_check.py: a part's boxes add up to its budget).

PROOF_STAGES: Tuple[Stage, ...] = (
    # measured 14.9 s: jax start, nvidia-smi, the carried imports, an 8192^3 bf16 GEMM.
    Stage('environment', 'benchmarks.device.numerics:environment', 20, 30, part=1),
    # base widths, 1 layer, 8k ids, 8x32 tokens; the device compiles without autotuning
    # (correctness does not need the fastest kernels): CPU compile + 3 device compiles. The
    # first run, 2 layers with autotuning, recorded nothing in 55 s.
    Stage('numerics', 'benchmarks.device.numerics:numerics', 45, 60, part=1,
          xla_flags=NO_AUTOTUNE),
    # measured 82.5 s: ours' compile 46 s, 22 steps, the peer eager; torch.compile (~40 s)
    # runs only if the box has that left.
    Stage('train_base', 'benchmarks.device.train:train_base', 95, 60, part=1,
          shares_device=True),
    # measured 76.6 s: compile 41 s, 12 steps, the peer eager; torch.compile as above.
    Stage('train_big', 'benchmarks.device.train:train_big', 110, 60, part=1,
          shares_device=True),
    # measured: the 3900-step dev BLEU at 130 s, 16 compiles (61 s, 9 over 0.5 s), ~10 ms a
    # step; the end (5200 steps, averaging, the test decode at 64 rows) ~165 s.
    Stage('embedded_default', 'benchmarks.device.e2e:embedded_default', 180, 120, part=2,
          starts_jax=False),
    # measured: the device's decode of 1010 sentences 33 s (20 s compiling); the first 300
    # sentences on the device and the CPU backend.
    Stage('embedded_decode', 'benchmarks.device.e2e:embedded_decode', 50, 60, part=2,
          starts_jax=False),
    # measured: the seven forms ~10 s; the model twice in bf16 at base (without autotuning).
    Stage('attention_forms', 'benchmarks.device.numerics:attention_forms', 40, 30, part=2,
          xla_flags=NO_AUTOTUNE),
    # measured 262 s: Adam, Adafactor and the switch MoE side by side, 210 s each (the MoE's
    # test decode cut by the box). Before part 3: a variant's peer is Adam in the same call.
    Stage('embedded_variants', 'benchmarks.device.e2e:embedded_variants', 265, 150, part=4,
          starts_jax=False),
    # measured 89 s: base's train step 47 s, two eval programs 7 s each, beam decode 21 s.
    Stage('compile', 'benchmarks.device.train:compile_times', 90, 40, part=3),
    # measured 54 s: beam 4, 128 sentences, our compile 11 s, then ours and the peer timed.
    Stage('decode_speed', 'benchmarks.device.train:decode_speed', 60, 30, part=3,
          shares_device=True),
    # measured 63 s: 2 bucket shapes compiled in threads (44 s), 20 steps fed and staged.
    Stage('train_bucketed', 'benchmarks.device.train:train_bucketed', 120, 60, part=3),
)

# Part 'sweep' (issue 55): the big model in bf16 at ~25k-token packed batches, one candidate
# per stage (a flag XLA does not know aborts its process only), each against the baseline's
# losses on the same batches. Boxes: train_big measured 76.6 s with the peer and the fed
# steps, 41 s of it compiling (autotuning on); a candidate is start + compile + 12 staged
# steps (~55 s). Prepared and rehearsed on CPU; not yet run on a GPU.
SWEEP = 'benchmarks.device.sweep:candidate'
SWEEP_STAGES = (
    Stage('sweep_baseline', SWEEP, 65, 20, part='sweep'),  # today's: the others' reference
    Stage('sweep_cudnn', SWEEP, 58, 15, part='sweep', settings=(('attention_impl', 'cudnn'),)),
    # The same tokens a step in rows of 512 (48 rows) and of 128 (195 rows) instead of 256
    # (97): one process, both shapes compiled at once.
    Stage('sweep_rows', SWEEP, 80, 25, part='sweep', settings=(('row_length', (512, 128)),)),
    Stage('sweep_remat_dots', SWEEP, 58, 15, part='sweep',
          settings=(('remat_policy', 'dots_saveable'),)),
    Stage('sweep_scan', SWEEP, 52, 15, part='sweep', settings=(('scan_layers', True),)),
    # Each flag exists in XLA's debug_options_flags.cc (checked for jax 0.10.2 here: a flag
    # XLA does not know aborts at start; the defaults are false, true and false).
    Stage('sweep_latency_hiding', SWEEP, 55, 15, part='sweep',
          xla_flags='--xla_gpu_enable_latency_hiding_scheduler=true'),
    Stage('sweep_no_triton_gemm', SWEEP, 52, 15, part='sweep',
          xla_flags='--xla_gpu_enable_triton_gemm=false'),
    Stage('sweep_cublaslt', SWEEP, 52, 15, part='sweep',
          xla_flags='--xla_gpu_enable_cublaslt=true'),
    # No config key keeps Adam's moments in bf16: the existing `optimizer='module:factory'`
    # extension point does (optax's mu_dtype: the first moment; optax has none for the second).
    Stage('sweep_adam_mu_bf16', SWEEP, 56, 15, part='sweep',
          settings=(('optimizer', 'benchmarks.device.sweep:adam_mu_bf16'),)),
    Stage('sweep_summary', 'benchmarks.device.sweep:summary', 10, 10, part='sweep',
          starts_jax=False, final=True),
)
# Part 'compile_peer': train_base / train_big with boxes torch.compile fits (it took ~40 s+
# on the H200 after ours' 41-46 s compile and never fit part 1's boxes).
COMPILE_PEER_STAGES = (
    Stage('compile_peer_base', 'benchmarks.device.compile_peer:compile_peer_base', 200, 30,
          part='compile_peer', shares_device=True),
    Stage('compile_peer_big', 'benchmarks.device.compile_peer:compile_peer_big', 250, 30,
          part='compile_peer', shares_device=True),
)
STAGES = PROOF_STAGES + SWEEP_STAGES + COMPILE_PEER_STAGES
PARTS: Tuple[Part, ...] = (1, 2, 3, 4, 'sweep', 'compile_peer')
PART_BUDGET_S = 270  # parts 1-4, one command each: under 4.5 minutes on one H100
# The device tool allows 600 s a call: the sweep is one call of ~9 minutes.
PART_BUDGETS: Dict[Part, float] = {1: PART_BUDGET_S, 2: PART_BUDGET_S, 3: PART_BUDGET_S,
                                   4: PART_BUDGET_S, 'sweep': 540, 'compile_peer': 450}
SMOKE_BUDGET_S = 420  # parts 1-4 at smoke size on a loaded 2-core CPU
MIN_STAGE_S = 5  # the least time a stage is started with; a later one with less is skipped
