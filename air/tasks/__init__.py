"""MLGym-format tasks: task and dataset YAML, the task root, the workspace laid out in a sandbox, evaluation,
MLGym's agent commands, and the project's own built-in tasks (builtin/)."""
