"""A config uploaded to the Studio is read as written: no interpolation is resolved on
the server (``${oc.env:...}`` stays text) and no file a ``*_path`` key names is opened.

The Studio page runs through Streamlit's AppTest: the real script, its file uploader
given a real YAML file, without a browser.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.config import ConfigError
from trinity.studio.fields import schema_fields
from trinity.studio.generate import check_config, values_from_yaml

pytest.importorskip("streamlit")

APP = Path(__file__).resolve().parents[3] / "trinity" / "studio" / "app.py"
REPO = APP.parents[2]
SECRET = "hunter2-do-not-show"
FILE_SECRET = "root:x:0:0:secret-first-line"


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A secret in the server's environment, and two files with secret content."""
    monkeypatch.setenv("SOME_SECRET_VAR", SECRET)
    template = tmp_path / "passwd"
    template.write_text(FILE_SECRET + "\n")
    trainer = tmp_path / "trainer.yaml"
    trainer.write_text(f"trainer:\n  default_local_dir: {FILE_SECRET}\n")
    return {"template": template, "trainer": trainer}


def uploaded_config(secrets: dict[str, Path], tmp_path: Path) -> str:
    return (
        "project: studio-upload\n"
        "name: ${oc.env:SOME_SECRET_VAR}\n"
        f"checkpoint_root_dir: {tmp_path / 'checkpoints'}\n"
        "algorithm:\n  algorithm_type: grpo\n  repeat_times: 4\n"
        "model:\n"
        "  model_path: ${oc.env:SOME_SECRET_VAR,SmolLM2-135M-Instruct}\n"
        "  max_prompt_tokens: 64\n  max_response_tokens: 32\n"
        f"  chat_template_path: {secrets['template']}\n"
        f"trainer:\n  trainer_config_path: {secrets['trainer']}\n"
        "buffer:\n  batch_size: 2\n  total_steps: 2\n"
        "  explorer_input:\n    taskset:\n      name: arithmetic\n      storage_type: file\n"
        f"      path: {REPO / 'examples' / 'arithmetic' / 'data'}\n"
        "      format:\n        prompt_key: question\n        response_key: answer\n"
        "    default_workflow_type: math_workflow\n    default_reward_fn_type: math_reward\n"
    )


def test_an_uploaded_config_keeps_interpolations_and_opens_no_file(
    secrets: dict[str, Path], tmp_path: Path
) -> None:
    from streamlit.testing.v1 import AppTest, element_tree

    if not hasattr(getattr(element_tree, "FileUploader", None), "set_value"):
        pytest.skip("this Streamlit's AppTest cannot upload a file (no FileUploader.set_value)")
    text = uploaded_config(secrets, tmp_path)
    app = AppTest.from_file(str(APP), default_timeout=300)
    app.run()
    app.sidebar.get("file_uploader")[0].set_value(("run.yaml", text.encode(), "application/x-yaml"))
    app.run()
    assert [s.value for s in app.sidebar.success] == ["loaded run.yaml"]
    assert app.text_input(key="field:name").value == "${oc.env:SOME_SECRET_VAR}"
    assert (
        app.text_input(key="field:model.model_path").value
        == "${oc.env:SOME_SECRET_VAR,SmolLM2-135M-Instruct}"
    )
    assert any("kept as written" in note.value for note in app.info)
    app.button[0].click()
    app.run()
    [code] = app.code
    generated = code.value
    assert "name: ${oc.env:SOME_SECRET_VAR}" in generated
    assert f"chat_template_path: {secrets['template']}" in generated
    assert f"trainer_config_path: {secrets['trainer']}" in generated

    values = app.session_state["studio_values"]  # every form value, shown or not
    assert values["model.chat_template_path"] == str(secrets["template"])
    shown = [generated, *(str(v) for v in values.values())]
    shown += [e.value for e in (*app.warning, *app.error, *app.success, *app.markdown)]
    for text_shown in shown:
        assert SECRET not in text_shown
        assert "secret-first-line" not in text_shown


def test_reading_and_checking_resolve_nothing_and_read_no_file(
    secrets: dict[str, Path], tmp_path: Path
) -> None:
    fields = schema_fields()
    values = values_from_yaml(uploaded_config(secrets, tmp_path), fields)
    assert values["name"] == "${oc.env:SOME_SECRET_VAR}"
    assert values["model.chat_template_path"] == str(secrets["template"])
    assert values.get("model.custom_chat_template") is None
    assert values["trainer.trainer_config_path"] == str(secrets["trainer"])

    # a typed key holding an interpolation is refused in one line, unresolved
    with pytest.raises(ConfigError) as err:
        values_from_yaml("model:\n  max_prompt_tokens: ${oc.env:SOME_SECRET_VAR}\n", fields)
    message = str(err.value)
    assert message.startswith("model.max_prompt_tokens: ")
    assert "${oc.env:SOME_SECRET_VAR}" in message and SECRET not in message
    assert "\n" not in message

    # the check names the interpolation as written, never its value on this machine
    error = check_config(
        "model:\n  max_prompt_tokens: 8\n  max_model_len: '${oc.env:SOME_SECRET_VAR}'\n"
    )
    assert error is not None and SECRET not in str(error)
    error = check_config(f"trainer:\n  trainer_config_path: {secrets['trainer']}\n")
    assert error is None or "secret-first-line" not in str(error)
