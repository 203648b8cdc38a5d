"""OpenAI's Chat Completions, Completions and Embeddings APIs (`/v1/chat/completions`,
`/v1/completions`, `/v1/embeddings`): their bodies, logprobs and token-id input."""
