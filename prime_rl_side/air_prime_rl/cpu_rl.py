"""prime-rl's own `rl` (launcher, vLLM server, orchestrator, trainer) on a machine with no GPU.

Installed by `scripts/install_prime_rl.sh --cpu` as a `.pth` line in the CPU venv, so every process `rl`
starts (each is a new interpreter: `inference`, `orchestrator`, `env-server`, torchrun's trainer ranks) runs
`install()` at start. `install()` costs an import-hook registration, nothing more: each patch is applied
right after the prime-rl module it concerns is first imported, and only where no GPU is there. The patches,
each for something in prime-rl that assumes a GPU (docs/prime-rl-cpu.md has the list with the reasons):

- launcher (`prime_rl.utils.process`): `get_physical_gpu_ids` asks NVML for the GPUs when
  CUDA_VISIBLE_DEVICES is unset; with no NVML it fails. Here it answers slot ids (0..7): `[deployment]`'s
  GPU counts become process slots, which nothing binds on a CPU.
- trainer (`prime_rl.trainer.perf`, imported by `prime_rl.trainer.rl.train` after its model and parallel
  code, at both pins): every "cuda" device is the CPU, gloo for NCCL, float32 FSDP compute, MFU not divided
  by a GPU's peak (air_prime_rl.cpu_torch, .v1.cpu, .classic.trainer), and today's flash-attn varlen call
  computed by torch SDPA where flash-attn is the import-only stand-in (c87c19b's config names sdpa).
- weights (air_prime_rl.served_weights): the trainer's broadcast in float32 on a CPU, as vLLM serves it there;
  559b447's reload processes a tied LM head anew (GPU or not: vLLM 0.26's layerwise reload skips it).

stdlib only at install time; torch and prime-rl are imported when a patch applies.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable

SLOTS = 8  # slot ids the launcher may hand out when there is no GPU: one per process it starts, at most


def _no_gpu() -> bool:
    """No CUDA device here (NVML is not asked: it is what fails on a CPU host)."""
    if os.environ.get("AIR_PRIME_RL_FORCE_CPU") == "1":
        return True
    import torch

    return not torch.cuda.is_available()


def patch_launcher(process_module) -> None:
    find_gpus = process_module.get_physical_gpu_ids

    def physical_gpu_ids() -> list[int]:
        if os.environ.get("CUDA_VISIBLE_DEVICES") is not None or not _no_gpu():
            return find_gpus()
        print(
            f"[air_prime_rl.cpu_rl] no GPU here: [deployment] counts are CPU process slots 0-{SLOTS - 1}",
            file=sys.stderr,
        )
        return list(range(SLOTS))

    process_module.get_physical_gpu_ids = physical_gpu_ids


def patch_trainer(_perf_module) -> None:
    if not _no_gpu():
        return
    import importlib.util

    import torch

    if importlib.util.find_spec("prime_rl.entrypoints") is not None:  # today's prime-rl (559b447 and on)
        from air_prime_rl.v1.cpu import redirect_cuda_to_cpu_v1
        from air_prime_rl.v1.trainer import _flash_attn_is_real, use_sdpa_varlen

        redirect_cuda_to_cpu_v1()
        if not _flash_attn_is_real():
            use_sdpa_varlen()
        how = "air_prime_rl.v1.cpu"
    else:  # c87c19b: its config has attn = "sdpa" and float32 dtypes; the rest is CUDA calls and MFU
        from air_prime_rl.classic.trainer import _cpu_prime_rl
        from air_prime_rl.cpu_torch import redirect_cuda_to_cpu

        redirect_cuda_to_cpu()
        _cpu_prime_rl()
        how = "air_prime_rl.cpu_torch"
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    print(f"[air_prime_rl.cpu_rl] no GPU here: the trainer runs on the CPU ({how})", file=sys.stderr)


def patch_broadcast_dtype(name: str) -> Callable:
    def patch(weights_module) -> None:
        if _no_gpu():
            from air_prime_rl.served_weights import broadcast_in_float32

            broadcast_in_float32(weights_module, name)

    return patch


def patch_reload(filesystem_module) -> None:
    if hasattr(filesystem_module, "load_weights_checkpoint_layerwise"):  # 559b447's layerwise reload
        from air_prime_rl.served_weights import retie_after_reload

        retie_after_reload(filesystem_module)


PATCHES: dict[str, Callable] = {
    "prime_rl.utils.process": patch_launcher,
    "prime_rl.trainer.perf": patch_trainer,
    # the policy that samples is the one that trains (air_prime_rl.served_weights)
    "prime_rl.utils.weights": patch_broadcast_dtype("gather_weights_parallel"),  # 559b447
    "prime_rl.trainer.weights": patch_broadcast_dtype("gather_weights_on_master"),  # c87c19b
    "prime_rl.inference.vllm.worker.filesystem": patch_reload,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch: Callable) -> None:
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._patch(module)


class _PatchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of a module named in PATCHES so its patch runs after it."""

    def find_spec(self, name, path, target=None):
        patch = PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def install() -> None:
    if os.environ.get("AIR_PRIME_RL_CPU_PATCHES") == "0":  # a way out, for comparing with prime-rl unpatched
        return
    if not any(isinstance(finder, _PatchFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchFinder())
