"""The air command line: one module per command group; main wires them."""
