"""The explorer's rollout engines: ``explorer.rollout_model.engine_num`` replicas.

Engine 0 always lives in the explorer's own process; engines 1.. run each in its own
Ray actor (:class:`EngineActor`) when Ray is initialised, and in this process otherwise
(unit tests, debugging). Keeping engine 0 local means the default single-engine run
has no extra process: a second process would hold its own copy of torch and of the
weights (several hundred MB) and would add a Ray round trip to every request.

Past 400 lines on purpose: the replicas of one model (local engine 0, engine actors and
their clients) and the wrappers served over them are built, reloaded and closed together,
on CPU and on GPU alike.

:class:`EngineClient` gives a remote engine the interface of
:class:`~trinity.rollout.engine.TransformersEngine` that
:class:`~trinity.rollout.wrapper.ModelWrapper` uses, so workflows call every engine the
same way. An engine actor is threaded: concurrent calls from several runners reach its
engine together and its request batcher merges them into shared decode batches.

    engines = RolloutEngines.from_config(config, model_dir)
    wrappers = [ModelWrapper(e) for e in engines.engines]
    engines.load_state_dict(state_dict, version=3)  # every replica, local and remote

:class:`ModelReplicas` puts wrappers with the config's token limits on a model's
engines and serves them on the OpenAI API when the config asks; the explorer builds one
for the rollout model and one for each auxiliary model (whose engines it also builds:
they are not trained and never receive weights).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from trinity.config import Config, InferenceModelConfig, trainer_settings
from trinity.config.device_plan import DevicePlan, device_plan
from trinity.rollout.engine import (
    TransformersEngine,
    chat_template_args,
    load_tokenizer,
    render_chat,
)
from trinity.rollout.sampling import Sample, SamplingParams
from trinity.rollout.vision_engine import rollout_engine
from trinity.rollout.wrapper import ModelWrapper
from trinity.sync.collective import WeightGroup, receive_into
from trinity.sync.weight_slot import SlotReader, SlotState, SlotVersion
from trinity.sync.weights import from_object_store, to_object_store
from trinity.utils.resources import ENGINE_CPUS, cluster_gpus, gpu_ids

# concurrent calls an engine actor serves beyond its runners (weight loads, stats)
_SPARE_CALLS = 4


class EngineActor:
    """A :class:`TransformersEngine` as a Ray actor (a thin wrapper, built in-process by tests).

    Its process starts with ``explorer.env_vars`` (the actor's ``runtime_env``), as the
    explorer's does.
    """

    def __init__(self, engine_args: dict[str, Any]) -> None:
        # Ray gives zero-CPU actors OMP_NUM_THREADS=1; an engine decodes with every core
        threads = max(1, os.cpu_count() or 1)
        self.engine = rollout_engine(**engine_args, num_threads=threads)
        self.slot_reader = SlotReader()  # maps the node's weight slot once it is used

    def info(self) -> dict[str, Any]:
        return {
            "max_model_len": self.engine.max_model_len,
            "model_version": self.engine.model_version,
            "num_batches": self.engine.num_batches,
            "pid": os.getpid(),
            "env": dict(os.environ),
        }

    def gpu_ids(self) -> list[int]:
        """The GPU ids Ray gave this actor ([] on CPU)."""
        return gpu_ids()

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, media: list[Any] | None = None
    ) -> list[list[Sample]]:
        # media: each prompt's images, for a vision-language model's engine
        return self.engine.generate(prompts, params, **({"media": media} if media else {}))

    def compute_logprobs(
        self,
        token_ids: list[list[int]],
        prompt_lengths: list[int],
        temperature: float,
        media: list[Any] | None = None,
    ) -> list[list[float]]:
        extra = {"media": media} if media else {}
        return self.engine.compute_logprobs(token_ids, prompt_lengths, temperature, **extra)

    def load_state_dict(self, state_dict: Any, version: int) -> int:
        """``state_dict``: tensors, their object-store form (``to_object_store``), or a
        version of the node's shared-memory slot (``trinity.sync.weight_slot``), which
        the explorer keeps from being overwritten until every engine has loaded it."""
        if isinstance(state_dict, SlotVersion):
            state_dict = self.slot_reader.read(state_dict)
        elif state_dict and isinstance(next(iter(state_dict.values())), tuple):
            state_dict = from_object_store(state_dict)
        self.engine.load_state_dict(state_dict, version)
        return version

    def join_weight_group(self, address: Any, rank: int, timeout_s: float) -> None:
        """Join the trainer's weight broadcast group (``sync_method: nccl``)."""
        self.weight_group = WeightGroup(address, rank, timeout_s)

    def receive_weights(self, want_fingerprint: bool) -> tuple[int, str | None] | None:
        """Load the next broadcast weights: (version, fingerprint if wanted), or None
        once the group closed (``trinity.sync.collective.receive_into``)."""
        return receive_into(self.weight_group, self.engine, want_fingerprint)

    def close(self) -> None:
        self.slot_reader.close()
        self.engine.close()


class EngineClient:
    """The engine interface ModelWrapper needs, served by an :class:`EngineActor` handle.

    The tokenizer is loaded here, so chat templates and decoding cost no round trip.
    ``model_version`` is the version this client last installed: the explorer is the
    only process that loads weights into its engines.
    """

    def __init__(
        self,
        handle: Any,
        model_dir: str,
        chat_template: str | None = None,
        enable_thinking: bool | None = None,
    ) -> None:
        import ray

        self.handle = handle
        self.model_dir, self.chat_template = model_dir, chat_template
        self._processor: Any = None  # a vision-language model's, loaded on first use
        self.tokenizer = load_tokenizer(model_dir, chat_template)
        self.template_args = chat_template_args(enable_thinking)
        info = ray.get(handle.info.remote())
        self.max_model_len = int(info["max_model_len"])
        self.model_version = int(info["model_version"])

    def apply_chat_template(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> list[int]:
        return render_chat(self.tokenizer, messages, add_generation_prompt, **self.template_args)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, media: list[Any] | None = None
    ) -> list[list[Sample]]:
        import ray

        return ray.get(self.handle.generate.remote(prompts, params, media))

    async def agenerate(
        self, prompts: list[list[int]], params: SamplingParams, media: list[Any] | None = None
    ) -> list[list[Sample]]:
        return await self.handle.generate.remote(prompts, params, media)

    def render_media(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **extra: Any
    ) -> Any:
        """A vision-language model's prompt with images, rendered here by its processor."""
        from trinity.rollout.multimodal import load_processor, render_media_chat

        if self._processor is None:
            self._processor = load_processor(self.model_dir, self.chat_template)
        return render_media_chat(
            self._processor, messages, add_generation_prompt, **self.template_args, **extra
        )

    def compute_logprobs(
        self,
        token_ids: list[list[int]],
        prompt_lengths: list[int],
        temperature: float = 1.0,
        media: list[Any] | None = None,
    ) -> list[list[float]]:
        import ray

        call = self.handle.compute_logprobs.remote(token_ids, prompt_lengths, temperature, media)
        return ray.get(call)

    def load_state_dict(self, state_dict: Any, version: int) -> None:
        """Install weights; ``state_dict`` may be a Ray object ref (put once for all engines)."""
        import ray

        ray.get(self.handle.load_state_dict.remote(state_dict, version))
        self.model_version = version

    def info(self) -> dict[str, Any]:
        import ray

        return ray.get(self.handle.info.remote())

    def close(self) -> None:
        import ray

        try:
            ray.get(self.handle.close.remote(), timeout=30)
        finally:
            ray.kill(self.handle)


class RolloutEngines:
    """Every replica of the rollout model; weight updates reach them all."""

    def __init__(self, engines: list[TransformersEngine | EngineClient]) -> None:
        if not engines:
            raise ValueError("RolloutEngines needs at least one engine")
        self.engines = engines

    @classmethod
    def from_config(cls, config: Config, model_dir: str) -> RolloutEngines:
        """The rollout model's replicas, serving the weights in ``model_dir``."""
        rollout = config.explorer.rollout_model
        max_model_len = rollout.max_model_len or config.model.max_model_len
        external = config.model.external_model
        if external.enable:  # the endpoint stands in for every replica
            from trinity.rollout.external import OpenAIEngine

            engine = OpenAIEngine.from_env(
                external.base_url_env,
                external.api_key_env,
                external.model_name or config.model.model_path,
                str(model_dir),
                max_model_len=max_model_len,
                chat_template=rollout.chat_template,
                enable_thinking=rollout.enable_thinking,
            )
            return cls([engine])  # type: ignore[list-item]
        # the policy's config as the trainer builds it (trinity/rollout/overrides.py)
        override = trainer_settings(config.trainer).policy.override_config
        return cls.for_model(
            config, rollout, model_dir, "explorer.rollout_model", max_model_len, override
        )

    @classmethod
    def for_model(
        cls,
        config: Config,
        model: InferenceModelConfig,
        model_dir: str,
        path: str,
        max_model_len: int | None,
        override_config: dict[str, Any] | None = None,
    ) -> RolloutEngines:
        """``model.engine_num`` replicas of the model in ``model_dir`` (``path`` names its
        config section in errors): the first in this process, the others Ray actors;
        ``override_config`` replaces entries of the model's config.json."""
        if model.engine_num < 1:
            raise ValueError(f"{path}.engine_num must be >= 1, got {model.engine_num}")
        base_seed = model.seed if model.seed is not None else config.seed
        plan = _device_plan(config)
        on_gpu = plan is not None and plan.kind != "cpu"

        def args(i: int) -> dict[str, Any]:
            # each replica its own seed, so replicas do not repeat each other's samples
            found = {
                "model_path": str(model_dir),
                "dtype": model.dtype or config.model.dtype,
                "max_model_len": max_model_len,
                "seed": base_seed + i,
                "chat_template": model.chat_template,
                "enable_thinking": model.enable_thinking,
                "override_config": override_config or None,
            }
            if on_gpu:  # a GPU plan only: a CPU run builds its engines as before
                found["gpu_memory_utilization"] = model.gpu_memory_utilization
            return found

        engines: list[TransformersEngine | EngineClient] = []
        for i in range(model.engine_num):
            if i == 0 and (plan is None or plan.first_engine_in_explorer(path)):
                device = {"device": _local_device(config)} if on_gpu else {}
                engines.append(rollout_engine(**args(0), **device))
            else:  # its own actor, with the GPUs the plan gives it
                gpus = plan.engine_gpus(path, i) if plan is not None else 0
                remote_args = {**args(i), "device": "cuda"} if gpus else args(i)
                engines.append(_remote_engine(config, remote_args, str(model_dir), gpus))
        return cls(engines)

    def gpu_ids(self) -> list[list[int]]:
        """The GPU ids Ray gave each replica's process ([] each on CPU or without Ray)."""
        import ray

        remote = [e.handle.gpu_ids.remote() for e in self.in_actors]
        found = iter(ray.get(remote)) if remote else iter(())
        here = gpu_ids() if ray.is_initialized() else []
        return [next(found) if isinstance(e, EngineClient) else here for e in self.engines]

    @property
    def in_actors(self) -> list[EngineClient]:
        """The replicas that run in Ray actors of their own."""
        return [e for e in self.engines if isinstance(e, EngineClient)]

    @property
    def in_process(self) -> list[TransformersEngine]:
        """The replicas that run in this process."""
        return [e for e in self.engines if not isinstance(e, EngineClient)]

    @property
    def model_version(self) -> int:
        return self.engines[0].model_version

    def load_state_dict(self, state_dict: dict[str, Any], version: int) -> None:
        """Load ``state_dict`` into every engine; remote ones fetch one shared copy."""
        remote = self.in_actors
        shared: Any = state_dict
        if remote:
            import ray

            if isinstance(state_dict, SlotState):  # every engine reads the node's slot
                shared = state_dict.version
            else:  # read in place by every engine
                shared = ray.put(to_object_store(state_dict))
            refs = [e.handle.load_state_dict.remote(shared, version) for e in remote]
        for engine in self.in_process:
            engine.load_state_dict(state_dict, version)
        if remote:
            ray.get(refs)
            for engine in remote:
                engine.model_version = version

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


class MemoryHandover:
    """mode colocate: the explorer's engines give their KV memory up while the trainer on
    the same GPU steps (:meth:`release`, after a step's rollouts) and take it again
    before the next rollouts (:meth:`retake`). Only engines in this process: a colocated
    run has no other."""

    def __init__(self, engines: Sequence[TransformersEngine | EngineClient]) -> None:
        self.engines = [e for e in engines if isinstance(e, TransformersEngine)]

    def release(self) -> None:
        for engine in self.engines:
            engine.release_memory()

    def retake(self) -> None:
        for engine in self.engines:
            engine.retake_memory()


class ModelReplicas:
    """One model's replicas as workflows call them, and their OpenAI-compatible servers.

    Each replica gets a root :class:`ModelWrapper` (the config's token limits, no
    history) and a template spawned from it with ``enable_history`` from the config;
    the runner pool spawns every slot's own wrapper from the templates. With
    ``enable_openai_api`` each root serves its replica at
    ``openai_api_host:openai_api_port + i`` (port 0: any free one): requests to the
    plain ``/v1`` address belong to no workflow and are not recorded, while a slot's
    wrapper is served under its own ``/scoped/<key>/v1`` path on the same server, so
    what a workflow sends through ``get_openai_client()`` lands in its own history.

    Args:
        config: the run's config (model token limits and truncation).
        model: the model's section, ``explorer.rollout_model`` or an auxiliary model.
        engines: its replicas.
        path: the section's key path, for messages.
        owns_engines: close the engines in :meth:`close` (auxiliary models).
    """

    def __init__(
        self,
        config: Config,
        model: InferenceModelConfig,
        engines: RolloutEngines,
        path: str,
        *,
        owns_engines: bool = False,
        logger: logging.Logger | None = None,
    ) -> None:
        self.engines = engines
        self.path = path
        self.owns_engines = owns_engines
        name = model.model_path or config.model.model_path
        self.roots = [
            ModelWrapper(
                engine,
                max_prompt_tokens=model.max_prompt_tokens,
                max_response_tokens=model.max_response_tokens,
                min_response_tokens=config.model.min_response_tokens,
                enable_prompt_truncation=config.model.enable_prompt_truncation,
                enable_history=False,
                name=name,
            )
            for engine in engines.engines
        ]
        self.wrappers = [root.spawn(enable_history=model.enable_history) for root in self.roots]
        self.base_urls: list[str] = []
        try:
            if model.enable_openai_api:
                for i, root in enumerate(self.roots):
                    port = model.openai_api_port + i if model.openai_api_port else 0
                    self.base_urls.append(self._serve(root, model, port))
                    if logger is not None:
                        logger.info(
                            "%s replica %d: OpenAI API at %s (model '%s'%s)",
                            path,
                            i,
                            self.base_urls[-1],
                            root.name,
                            ", API key required" if model.openai_api_key else "",
                        )
        except BaseException:
            self.close()
            raise

    @classmethod
    def auxiliary(
        cls, config: Config, index: int, logger: logging.Logger | None = None
    ) -> ModelReplicas:
        """``explorer.auxiliary_models[index]``: its engines are built here."""
        from trinity.rollout.model_path import resolve_model_path

        model = config.explorer.auxiliary_models[index]
        path = f"explorer.auxiliary_models[{index}]"
        if not model.model_path:
            raise ValueError(f"{path}.model_path is required: the weights the model serves")
        model_dir = str(resolve_model_path(model.model_path))
        engines = RolloutEngines.for_model(config, model, model_dir, path, model.max_model_len)
        return cls(config, model, engines, path, owns_engines=True, logger=logger)

    def _serve(self, root: ModelWrapper, model: InferenceModelConfig, port: int) -> str:
        from trinity.rollout.openai_admission import AdmissionLimits

        limits = AdmissionLimits.from_config(model, self.path)
        try:
            server = root.serve_openai(model.openai_api_host, port, model.openai_api_key, limits)
        except OSError as err:
            raise OSError(str(err).replace("explorer.rollout_model", self.path)) from None
        return server.base_url

    def close(self) -> None:
        """Stop the OpenAI servers (and the engines when this owns them)."""
        for root in self.roots:
            root.close()
        if self.owns_engines:
            self.engines.close()


def _device_plan(config: Config) -> DevicePlan | None:
    """The run's device plan inside a Ray actor; None without Ray (tests, debugging) or
    for a CPU config, whose engines ask Ray for no GPU."""
    import ray

    if not ray.is_initialized() or config.cluster.gpu_per_node == 0:
        return None
    return device_plan(config, on_gpu=cluster_gpus() > 0)  # as the driver planned the run


def _local_device(config: Config) -> Any:
    """The device of an engine in this process: the GPU Ray gave it, else the CPU."""
    from trinity.utils.device import compute_device

    return compute_device(config.cluster)


def _remote_engine(
    config: Config, engine_args: dict[str, Any], model_dir: str, num_gpus: float = 0
) -> TransformersEngine | EngineClient:
    """An engine in its own Ray actor with ``num_gpus`` GPUs, or in this process when Ray
    is not running."""
    import ray

    if not ray.is_initialized():
        return rollout_engine(**engine_args)

    explorer = config.explorer
    handle = (
        ray.remote(EngineActor)
        .options(
            num_cpus=ENGINE_CPUS,
            num_gpus=num_gpus,
            max_concurrency=explorer.runner_per_model + _SPARE_CALLS,
            runtime_env={"env_vars": {str(k): str(v) for k, v in explorer.env_vars.items()}},
        )
        .remote(engine_args)
    )
    return EngineClient(
        handle, model_dir, engine_args.get("chat_template"), engine_args.get("enable_thinking")
    )
