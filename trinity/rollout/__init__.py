"""Rollout engines and the OpenAI-compatible server: where the policy's samples come from.

- ``model_path``: model path (local dir, ``.gguf``, built-in name, hub id) -> loadable dir
- ``sampling``: ``SamplingParams``, ``Sample`` and the per-step token sampler
- ``engine``: ``TransformersEngine``, batched KV-cache decoding (``vision_engine``: with images)
- ``continuous_batching``, ``slot_cache``, ``step_graphs``, ``device_sampler``: the static
  decode path (CUDA's default): slots, a preallocated cache, steps captured per bucket
- ``multimodal``, ``media*``: processors, images in prompts and experiences
- ``decoding``: the engine's decode loop; ``scoring``: its logprobs of given responses
- ``fast_decode``: the fused decoder of Llama-family models
- ``chat``: tokenizer with the run's chat template, messages -> prompt token ids
- ``batcher``: merges concurrent requests into decode batches (used by the engine)
- ``cpu_linear``: prepacked bf16 linear layers that speed up CPU decoding
- ``wrapper``: ``ModelWrapper``, chat/generate calls that return ``Experience`` objects
- ``server``: the OpenAI-compatible API (``openai_requests``: request bodies and
  errors; ``openai_admission``: body size, token budget and queue bound;
  ``openai_completions``: the replies; ``openai_stream``, ``openai_tools``)
"""
