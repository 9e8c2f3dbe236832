"""One rollout, the agent's side of the loop: model text to command, the words the agent reads, scores to
reward, the trajectory record, the env's settings, and the verifiers env that glues them (mlgym_env and load,
the only modules here that import verifiers)."""
