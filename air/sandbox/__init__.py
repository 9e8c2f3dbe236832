"""One container and what runs inside it: its life (limits, labels, files, destroy), the persistent shell,
the shell's wire protocol, the warm pool, and the image they run. Knows nothing of tasks or models."""
