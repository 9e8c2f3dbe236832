"""The model folders air serves: the tiny random Llama of our own (``air tiny-model``), SmolLM2-135M-Instruct
prepared from PyPI (``air smollm2``), and the policy specs that name a model (``smollm2``, ``model:DIR``)."""
