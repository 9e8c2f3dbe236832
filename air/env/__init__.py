"""One rollout, the agent's side of the loop: model text to command, the words the agent reads, scores to
reward, the trajectory record, the env's settings, and the verifiers env that glues them (mlgym_env and load,
the only modules here that import verifiers)."""

# The layers above the env that may not reach the sandbox (the viewer) take the agent's text through here.
from air.sandbox.neutral import neutral as neutral
