"""``python -m mcp_server`` starts the MCP server on stdio."""
from mcp_server.server import main

if __name__ == "__main__":
    main()
