"""Scripted policies: agents that stand in for a language model when no weights are at hand."""
