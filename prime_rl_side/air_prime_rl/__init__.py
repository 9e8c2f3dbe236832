"""air-agent's code that runs inside prime-rl's venv, started by ``air rehearse`` (never imported by ``air``).

One entry per generation and role, run as ``python -m``:

- ``classic.entry`` (c87c19b): the orchestrator's config as ``rl`` derives it; its orchestrator with a
  stand-in trainer thread and the metrics captured;
- ``classic.trainer``: c87c19b's own trainer, its config derived as ``rl`` does, measured, on a GPU or the CPU;
- ``v1.entry`` (559b447): prime-rl's ``write_subconfigs``; the stand-in trainer process;
- ``v1.trainer``: 559b447's own trainer, measured, on a GPU or the CPU (``v1.cpu``: its CPU fixes);
- ``rl_signal``: a fixed two-completion batch and one-step trainer config in either generation's own formats,
  for the RL signal guard (tests/rehearsal/test_rl_signal.py);

and what the trainers share: ``cpu_torch`` (CUDA calls to the CPU), ``sdpa_varlen`` (flash-attn's varlen
call by torch SDPA), ``trainer_probe`` (one JSON line per optimizer step).

Its rule, checked by tests/test_architecture.py: the standard library, torch, prime_rl and itself only (plus
the few packages prime-rl's venv provides that it names there), because it runs in someone else's
environment. The import-only stand-ins beside it (``../stand_ins/``) are put on that venv's path apart.
"""
