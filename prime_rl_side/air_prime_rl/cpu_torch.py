"""Run a CUDA-only PyTorch trainer (prime-rl's) unchanged on a machine without a GPU.

`redirect_cuda_to_cpu()` is a no-op where `torch.cuda.is_available()`; otherwise every "cuda" device a
trainer names becomes the CPU, and the torch.cuda bookkeeping calls it makes become harmless. Runs inside
prime-rl's venv: stdlib + torch only (prime-rl itself is patched only where it is importable).
"""

from __future__ import annotations

import os
import resource

import torch
from torch.overrides import TorchFunctionMode

CPU = torch.device("cpu")
# Methods whose positional arguments may name a device (`t.to("cuda")`, `t.to("cuda", dtype)`).
_DEVICE_METHODS = {torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros, torch.Tensor.new_ones}


def is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, str) and device.split(":")[0] == "cuda"


def to_cpu(device):
    return CPU if is_cuda(device) else device


class CudaToCpu(TorchFunctionMode):
    """Maps every device="cuda" (factory functions, Tensor.to/new_*) to the CPU; Tensor.cuda() is a no-op."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:  # t.cuda(): the tensor stays where it is (the CPU)
            return args[0]
        if "device" in kwargs and is_cuda(kwargs["device"]):
            kwargs = {**kwargs, "device": CPU}
        if func in _DEVICE_METHODS:
            args = tuple(to_cpu(a) for a in args)
        return func(*args, **kwargs)


_Generator = torch.Generator


class _AnyGenerator(type(_Generator)):
    def __instancecheck__(cls, obj):  # isinstance(g, torch.Generator) stays true for torch's own generators
        return isinstance(obj, _Generator)


class _CpuGenerator(_Generator, metaclass=_AnyGenerator):
    def __new__(cls, device="cpu"):  # torch.Generator(device="cuda") seeds LoRA init: a CPU generator does
        return _Generator(device=to_cpu(device))


def rss_bytes() -> int:
    """This process's resident memory now (stands in for CUDA's memory figures)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


_installed: list[CudaToCpu] = []


def _returning(value):
    def patched(*args, **kwargs):
        return value()

    return patched


def redirect_cuda_to_cpu() -> bool:
    """Install the redirection for the life of this process; True if installed (now or before)."""
    if torch.cuda.is_available():
        return False
    if _installed:
        return True
    mode = CudaToCpu()
    mode.__enter__()  # never left: the trainer runs under it to the end
    _installed.append(mode)

    cuda = torch.cuda
    # One new function per patched name: torch._dynamo's rule map rejects one object under two torch.cuda names.
    # Device selection, syncs and allocator resets have nothing to do on the CPU.
    for name in ("set_device", "synchronize", "reset_peak_memory_stats", "reset_accumulated_memory_stats"):
        setattr(cuda, name, _returning(lambda: None))
    cuda.empty_cache = _returning(lambda: None)  # no caching allocator on the CPU
    # Memory figures the trainer logs: the process's resident memory instead of the GPU's.
    cuda.max_memory_allocated = _returning(peak_rss_bytes)
    cuda.max_memory_reserved = _returning(peak_rss_bytes)
    cuda.memory_allocated = _returning(rss_bytes)
    cuda.memory_reserved = _returning(rss_bytes)
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    cuda.mem_get_info = _returning(lambda: (max(pages - rss_bytes(), 0), pages))  # (free, total) of host RAM
    cuda.current_device = _returning(lambda: 0)  # the one "device" is the CPU
    torch.Generator = _CpuGenerator  # torch.Generator(device="cuda") is a C call the mode does not see

    import torch.distributed as dist

    init_process_group = dist.init_process_group

    def init_on_gloo(*args, **kwargs):  # NCCL (the default with a GPU) needs CUDA: gloo runs on the CPU
        kwargs["backend"] = "gloo"
        kwargs.pop("device_id", None)
        return init_process_group(*args, **kwargs)

    dist.init_process_group = init_on_gloo
    _patch_prime_rl()
    return True


def _patch_prime_rl() -> None:
    """Both pins of prime-rl, their code unchanged: the device mesh falls back to "cuda" when torch sees
    no accelerator (made the CPU), and setup_fsdp hard-codes MixedPrecisionPolicy(param_dtype=bfloat16),
    kept at float32 here (the weights' own dtype; bfloat16 matmuls are emulated, many times slower, on CPUs
    without AVX512-BF16 or AMX)."""
    try:
        import prime_rl.trainer.model as model_module
        import prime_rl.trainer.parallel_dims as parallel_dims
    except ImportError:  # not in prime-rl's venv (the unit test): nothing to patch
        return
    parallel_dims.device_type = "cpu"
    policy = model_module.MixedPrecisionPolicy

    def float32_policy(*args, **kwargs):
        kwargs["param_dtype"] = torch.float32
        return policy(*args, **kwargs)

    model_module.MixedPrecisionPolicy = float32_policy
