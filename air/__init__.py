"""air-agent: train language models to do ML research with RL on MLGym-format tasks."""

__version__ = "0.1.0"
