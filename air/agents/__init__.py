"""Scripted agents that stand in for a language model, and the OpenAI-compatible server they answer behind."""
