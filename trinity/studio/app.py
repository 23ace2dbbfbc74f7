"""Trinity Studio: the config generator page (a Streamlit script).

Start it with ``trinity studio --port 8080`` (it runs ``streamlit run`` on this file).
Every widget edits one key of the config schema; its label is the YAML key and its
help text is the schema's help string. Each interaction re-runs this script top to
bottom: collect the values, build the YAML, check it with ``load_config`` (the
checks of ``trinity run``), then draw the form with a warning under the key a
problem is about, and the YAML once "Generate Config" was pressed.

Form values live in ``st.session_state[VALUES]`` (path -> value), because Streamlit
forgets the state of widgets that are not drawn, and each mode draws only some keys.
"""

from __future__ import annotations

import math
from typing import Any

import streamlit as st

from trinity.config import ConfigError
from trinity.studio.fields import FieldSpec, schema_fields
from trinity.studio.generate import (
    FieldValueError,
    check_config,
    config_data,
    field_of_error,
    parse_yaml_value,
    render_yaml,
    values_from_yaml,
    yaml_text,
)
from trinity.studio.layout import (
    ALWAYS_WRITTEN,
    BEGINNER_SECTIONS,
    EXPERT_SECTIONS,
    GENERAL,
    expert_fields,
    group_by_parent,
)

VALUES = "studio_values"
GENERATED = "studio_generated"
LOADED_FILE = "studio_loaded_file"
WIDGET = "field:"  # widget keys are "field:<dotted path>"
BEGINNER, EXPERT = "Beginner Mode", "Expert Mode"
KEPT_AS_WRITTEN = (
    "Interpolations such as ${oc.env:VAR} are kept as written: `trinity run` resolves them "
    "on the machine that runs it, as it reads the files that *_path keys name there."
)


@st.cache_resource
def _fields() -> list[FieldSpec]:
    return schema_fields()


def _widget_state(spec: FieldSpec, value: Any) -> Any:
    """A config value as its widget holds it."""
    if spec.kind == "yaml":
        return yaml_text(value)
    if spec.kind == "str":
        return "" if value is None else str(value)
    return value


def _config_value(spec: FieldSpec, state: Any) -> Any:
    """A widget's state as a config value; raises FieldValueError when it cannot be one."""
    if spec.kind == "yaml":
        return parse_yaml_value(spec, state)
    if spec.kind == "str":
        return None if spec.optional and state == "" else state
    if spec.kind in ("int", "float") and state is None and not spec.optional:
        raise FieldValueError(f"{spec.path}: needs a value (default: {spec.default})")
    return state


def _collect(fields: list[FieldSpec]) -> tuple[dict[str, Any], dict[str, str]]:
    """Current values of every key, and the problems of values that cannot be used."""
    values: dict[str, Any] = st.session_state.setdefault(VALUES, {})
    problems: dict[str, str] = {}
    for spec in fields:
        key = WIDGET + spec.path
        if key not in st.session_state:
            continue
        try:
            values[spec.path] = _config_value(spec, st.session_state[key])
        except FieldValueError as exc:
            problems[spec.path] = str(exc)
    return values, problems


def _choice_text(value: Any) -> str:
    if value is None:
        return "(unset)"
    return str(value).lower() if isinstance(value, bool) else str(value)  # as YAML writes it


def _draw(spec: FieldSpec, values: dict[str, Any], warnings: dict[str, str]) -> None:
    key = WIDGET + spec.path
    if key not in st.session_state:
        st.session_state[key] = _widget_state(spec, values.get(spec.path, spec.default))
    label, tip = spec.path, spec.help
    if spec.kind == "bool":
        st.checkbox(label, key=key, help=tip)
    elif spec.kind == "choice":
        options = list(spec.choices)
        if st.session_state[key] not in options:  # a name typed earlier, or from a file
            options.append(st.session_state[key])
        st.selectbox(
            label,
            options,
            key=key,
            help=tip,
            format_func=_choice_text,
            accept_new_options=spec.open_choices,
            placeholder="(unset)" if spec.optional else None,
        )
    elif spec.kind == "int":
        st.number_input(label, key=key, help=tip, step=1, placeholder="(unset)")
    elif spec.kind == "float":
        default = spec.default or 0.0
        step = abs(default) / 10 if default and math.isfinite(default) else 0.1
        st.number_input(
            label, key=key, help=tip, step=float(step), format="%g", placeholder="(unset)"
        )
    elif spec.kind == "str":
        st.text_input(label, key=key, help=tip, placeholder="(unset)" if spec.optional else "")
    else:
        st.text_area(label, key=key, help=tip + " (YAML)", height=68)
    if spec.path in warnings:
        st.warning(warnings[spec.path], icon="⚠️")


def _draw_columns(specs: list[FieldSpec], values, warnings, columns: int = 2) -> None:
    """Short widgets in ``columns`` columns, then the YAML text areas at full width."""
    short = [s for s in specs if s.kind != "yaml"]
    cols = st.columns(columns)
    for i, spec in enumerate(short):
        with cols[i % columns]:
            _draw(spec, values, warnings)
    for spec in specs:
        if spec.kind == "yaml":
            _draw(spec, values, warnings)


def _beginner(fields: list[FieldSpec], values, warnings) -> None:
    by_path = {f.path: f for f in fields}
    for title, paths in BEGINNER_SECTIONS.items():
        st.subheader(title)
        _draw_columns([by_path[p] for p in paths], values, warnings)


def _expert(fields: list[FieldSpec], values, warnings) -> None:
    st.subheader(GENERAL)
    _draw_columns(expert_fields(GENERAL, fields), values, warnings)
    blocks = [b for b in EXPERT_SECTIONS if b != GENERAL]
    for tab, block in zip(st.tabs(blocks), blocks, strict=True):
        with tab:
            for parent, specs in group_by_parent(expert_fields(block, fields)).items():
                has_warning = any(s.path in warnings for s in specs)
                with st.expander(parent, expanded=has_warning or parent.count(".") == 0):
                    _draw_columns(specs, values, warnings)


def _load_file(fields: list[FieldSpec]) -> None:
    upload = st.sidebar.file_uploader("Start from a config file", type=["yaml", "yml"])
    if upload is None or st.session_state.get(LOADED_FILE) == upload.file_id:
        return
    st.session_state[LOADED_FILE] = upload.file_id
    try:
        loaded = values_from_yaml(upload.getvalue().decode("utf-8"), fields)
    except (ConfigError, UnicodeDecodeError) as exc:
        st.sidebar.error(f"cannot load {upload.name}: {exc}")
        return
    st.session_state[VALUES] = loaded
    for spec in fields:  # widgets re-read their values from the loaded file
        st.session_state.pop(WIDGET + spec.path, None)
    st.sidebar.success(f"loaded {upload.name}")


def main() -> None:
    st.set_page_config(page_title="Trinity Studio", page_icon="⚙️", layout="wide")
    fields = _fields()
    st.title("Trinity Studio")
    st.caption(
        "Config generator: every key comes from the config schema; hover ? for its meaning. "
        "Labels are the YAML keys."
    )
    mode = st.sidebar.radio("Mode", (BEGINNER, EXPERT), key="studio_mode")
    _load_file(fields)

    values, problems = _collect(fields)
    text = render_yaml(config_data(fields, values, ALWAYS_WRITTEN))
    error = None if problems else check_config(text)
    warnings = dict(problems)
    if error is not None:
        target = field_of_error(error.path, (f.path for f in fields))
        if target is not None:
            warnings[target] = str(error)

    if any("${" in str(value) for value in values.values()):
        st.info(KEPT_AS_WRITTEN, icon="ℹ️")
    (_beginner if mode == BEGINNER else _expert)(fields, values, warnings)

    st.divider()
    messages = list(problems.values()) + ([str(error)] if error is not None else [])
    for message in messages:
        st.warning(message, icon="⚠️")
    if st.button("Generate Config", type="primary"):
        st.session_state[GENERATED] = True
    if not st.session_state.get(GENERATED):
        return
    if messages:
        st.error("The config is not valid yet: fix the warnings above and the YAML appears here.")
        return
    st.success("This config passes the checks of `trinity run`.")
    st.code(text, language="yaml")
    name = values.get("name") or "config"
    st.download_button(
        "Download config",
        data=text,
        file_name=f"{name}.yaml",
        mime="application/x-yaml",
        on_click="ignore",
    )


main()
