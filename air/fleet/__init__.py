"""Env nodes past one machine: an env server per node behind a gate (CURVE), a spreader beside the
orchestrator that hands a source's episodes to the least busy node and fails a lost node's runs."""
