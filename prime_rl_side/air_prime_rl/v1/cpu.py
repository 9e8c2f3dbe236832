"""What prime-rl main's (559b447) trainer needs on a machine with no GPU beyond air_prime_rl/cpu_torch.py.

`redirect_cuda_to_cpu_v1()` installs cpu_torch's `redirect_cuda_to_cpu()` (every "cuda" device becomes the
CPU, torch.cuda's bookkeeping harmless, gloo for NCCL, prime-rl's device mesh on the CPU) and then:

- MFU reported as 0: main divides by the GPU's peak FLOPs, which it sets to 0 when torch sees no GPU;
- `torch.cuda.get_device_capability` answering (8, 0), for code that asks before choosing a kernel
  (only `attn = "auto"` does; the rehearsal names flash_attention_2).

stdlib + torch + prime-rl only.
"""

from __future__ import annotations

import torch

from air_prime_rl.cpu_torch import redirect_cuda_to_cpu

_done: list[bool] = []


def redirect_cuda_to_cpu_v1() -> bool:
    """Install the redirection for this process (idempotent); False where a GPU is available."""
    if not redirect_cuda_to_cpu():
        return False
    if _done:
        return True
    _done.append(True)

    def device_capability(*args, **kwargs):
        return (8, 0)

    torch.cuda.get_device_capability = device_capability

    import prime_rl.trainer.perf as perf

    mfu_from_tps = perf.PerfCounter._mfu_from_tps

    def mfu_or_zero(self, tokens_per_second):
        return mfu_from_tps(self, tokens_per_second) if self.gpu_peak_flops else 0.0

    perf.PerfCounter._mfu_from_tps = mfu_or_zero
    return True
