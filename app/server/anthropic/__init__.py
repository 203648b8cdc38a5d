"""Anthropic's Messages API (`/v1/messages`, what Claude Code speaks): its bodies and content blocks."""
