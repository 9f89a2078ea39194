"""The faces: the operation registry, the MCP server, the CLI, worker processes, output confinement,
answer sizing and the generated reference (docs/ARCHITECTURE.md, "Three faces")."""
