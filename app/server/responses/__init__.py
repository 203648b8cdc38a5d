"""OpenAI's Responses API (`/v1/responses`, what Codex CLI speaks): its bodies, input items, output
items and the store that `previous_response_id` reads."""
