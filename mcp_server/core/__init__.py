"""What every engine may use: errors, vocabulary, environment, bounds, atomic writes, subprocesses,
result and request bases, operation declarations (docs/ARCHITECTURE.md, "Layers")."""
