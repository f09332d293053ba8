"""The client of an OpenAI-compatible model server (llama-server, vLLM, Ollama): the `http` analyzer."""
