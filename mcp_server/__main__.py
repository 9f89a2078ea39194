"""``python -m mcp_server`` starts the MCP server on stdio (behind the front: mcp_server/faces/front.py)."""
from mcp_server.faces.front import serve_stdio

if __name__ == "__main__":
    serve_stdio()
