"""Rollout models: where the policy's samples come from.

- ``resolve``: model path (local dir, ``.gguf``, built-in name, hub id) -> loadable dir
- ``sampling``: ``SamplingParams``, ``Sample`` and the per-step token sampler
- ``engine``: ``TransformersEngine``, batched KV-cache decoding on the CPU
- ``batcher``: merges concurrent requests into decode batches (used by the engine)
- ``cpu_linear``: prepacked bf16 linear layers that speed up CPU decoding
- ``wrapper``: ``ModelWrapper``, chat/generate calls that return ``Experience`` objects
"""
