"""The routes about models rather than one dialect's conversation: the model list (`/v1/models`, which
OpenAI's and Anthropic's clients both read), loading and unloading (llama-server's and LM Studio's
shapes), and reranking (llama-server's `/v1/rerank`)."""
