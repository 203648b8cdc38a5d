"""MCP servers the user added (mcp.json), their secrets, and their tools, through the official `mcp` SDK."""
