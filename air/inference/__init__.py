"""A stand-in inference server: any scripted policy behind a real OpenAI-compatible HTTP server,
answering like vLLM when given a model directory."""
