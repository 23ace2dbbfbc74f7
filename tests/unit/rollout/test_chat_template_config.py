"""The config's chat template reaches every rollout engine's chat rendering."""

from __future__ import annotations

from pathlib import Path

from trinity.rollout.engine import TransformersEngine

# a template that marks each message plainly, so the rendering is easy to predict
TEMPLATE = (
    "{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<<assistant>>"
    "{% if enable_thinking %}<think>{% endif %}{% endif %}"
)


def test_engine_renders_with_the_configured_template(tiny_model_dir: Path) -> None:
    messages = [{"role": "user", "content": "2+3?"}]
    default = TransformersEngine(str(tiny_model_dir), dtype="float32", pack_weights=False)
    custom = TransformersEngine(
        str(tiny_model_dir), dtype="float32", pack_weights=False, chat_template=TEMPLATE
    )
    thinking = TransformersEngine(
        str(tiny_model_dir),
        dtype="float32",
        pack_weights=False,
        chat_template=TEMPLATE,
        enable_thinking=True,
    )
    decode = custom.tokenizer.decode
    assert decode(custom.apply_chat_template(messages)) == "<<user>>2+3?\n<<assistant>>"
    assert decode(thinking.apply_chat_template(messages)) == "<<user>>2+3?\n<<assistant>><think>"
    assert "<<user>>" not in default.tokenizer.decode(default.apply_chat_template(messages))
    for engine in (default, custom, thinking):
        engine.close()


def test_rollout_engines_take_the_template_from_the_config(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from dataclasses import replace

    import yaml

    from trinity.config import load_config, to_dict
    from trinity.explorer.engines import RolloutEngines

    demo = Path(__file__).resolve().parents[3] / "examples/arithmetic/grpo.yaml"
    data = to_dict(
        load_config(demo, [f"model.model_path={tiny_model_dir}", f"checkpoint_root_dir={tmp_path}"])
    )
    data["model"]["custom_chat_template"] = TEMPLATE  # resolve hands it to the rollout model
    data["explorer"]["rollout_model"]["chat_template"] = None
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    config = load_config(path)
    model = replace(config.explorer.rollout_model, enable_thinking=True)
    engines = RolloutEngines.for_model(
        config, model, str(tiny_model_dir), "explorer.rollout_model", None
    )
    engine = engines.engines[0]
    rendered = engine.tokenizer.decode(
        engine.apply_chat_template([{"role": "user", "content": "hi"}])
    )
    assert rendered == "<<user>>hi\n<<assistant>><think>"
    engines.close()
