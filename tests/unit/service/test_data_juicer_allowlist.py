"""The Data-Juicer service's allowlist, and the argument checks of every recipe, against
the Data-Juicer installed here (the data_juicer extra).

The service's HTTP answers for the same cases: tests/integration/test_data_juicer_service.py.
"""

from __future__ import annotations

import importlib.util
import inspect
import re

import pytest

from trinity.service.data_juicer.allowlist import (
    ALLOWED_OPERATORS,
    CODE_OPERATORS,
    REFUSED_ARGS_OF,
    OperatorRefused,
)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("data_juicer") is None,
    reason="Data-Juicer is not installed (pip install -e '.[data_juicer]')",
)
# what a module does to run code, import a file or load a model or a file it is given
RISKY = re.compile(
    r"\beval\(|\bexec\(|spec_from_file_location|exec_module|trust_remote_code|prepare_model"
    r"|prepare_sentencepiece_model|\bopen\(|os\.system|subprocess"
)


def _registry() -> dict[str, type]:
    from data_juicer.ops import OPERATORS

    return OPERATORS.modules


def test_every_allowed_operator_is_installed_and_none_runs_code() -> None:
    registry = _registry()
    assert sorted(ALLOWED_OPERATORS - registry.keys()) == []
    assert CODE_OPERATORS <= registry.keys()
    assert not ALLOWED_OPERATORS & CODE_OPERATORS


def test_an_allowed_operator_that_can_load_or_run_something_has_that_argument_refused() -> None:
    # a newer Data-Juicer that teaches an allowed operator to load a model or run code
    # fails here until allowlist.py refuses the argument that does it
    registry = _registry()
    risky = sorted(
        name
        for name in ALLOWED_OPERATORS
        if RISKY.search(inspect.getsource(inspect.getmodule(registry[name])))
    )
    assert risky == sorted(REFUSED_ARGS_OF)
    for name, args in REFUSED_ARGS_OF.items():
        params = inspect.signature(registry[name].__init__).parameters
        assert set(args) <= set(params), name


def test_every_installed_operator_that_evaluates_code_is_outside_the_allowlist() -> None:
    registry = _registry()
    code = re.compile(r"\beval\(|\bexec\(|spec_from_file_location|exec_module")
    running = {
        name
        for name, cls in registry.items()
        if code.search(inspect.getsource(inspect.getmodule(cls)))
    }
    assert CODE_OPERATORS <= running
    assert running & ALLOWED_OPERATORS == {"remove_repeat_sentences_mapper"}  # its tokenizer


def _runner(process: list, allow_code_operators: bool = False):
    from trinity.service.data_juicer.runner import DataJuicerRunner

    return DataJuicerRunner(process, allow_code_operators=allow_code_operators)


@pytest.mark.parametrize(
    "item, message",
    [
        (
            {"python_lambda_mapper": {"lambda_str": "lambda s: s"}},
            "operator 'python_lambda_mapper' runs code the recipe gives",
        ),
        ({"llm_quality_score_filter": {}}, "operator 'llm_quality_score_filter' is not data-only"),
        (
            {"words_num_filter": {"tokenization": True}},
            "operator 'words_num_filter': argument tokenization=True ",
        ),
        (
            {"text_length_filter": {"work_dir": "/tmp/x"}},
            "operator 'text_length_filter': argument work_dir='/tmp/x' ",
        ),
    ],
)
def test_the_refusal_names_the_operator_and_the_key_that_allows_it(item, message) -> None:
    with pytest.raises(OperatorRefused) as caught:
        _runner([item])
    text = str(caught.value)
    assert text.startswith(message)
    assert "service.data_juicer.allow_code_operators: true" in text and "\n" not in text


def test_an_argument_at_its_default_is_not_refused() -> None:
    rows = _runner([{"words_num_filter": {"tokenization": False, "min_num": 2, "num_proc": 1}}])
    assert rows.run([{"text": "one"}, {"text": "one two"}]) == [
        {"text": "one two", "__dj__stats__": {"num_words": 2}}
    ]


def test_in_process_recipes_may_run_code() -> None:
    # the run's own config wrote this recipe: nothing to guard against in its own process
    runner = _runner(
        [{"python_lambda_mapper": {"lambda_str": "lambda s: {**s, 'text': s['text'] * 2}"}}],
        allow_code_operators=True,
    )
    assert runner.run([{"text": "ab"}]) == [{"text": "abab"}]


@pytest.mark.parametrize(
    "item, message",
    [
        (
            {"text_length_filter": {"min_len": "ten"}},
            "operator 'text_length_filter': argument min_len='ten' is not valid: ",
        ),
        (
            {"character_repetition_filter": {"rep_len": 0}},
            "operator 'character_repetition_filter': argument rep_len=0 is not valid: "
            "Input should be greater than 0",
        ),
        (
            {"text_length_filter": {"min_lenn": 3}},
            "operator 'text_length_filter' has no argument 'min_lenn'",
        ),
        (
            {"text_length_filter": {"num_proc": "many"}},
            "operator 'text_length_filter': argument num_proc='many' is not valid: ",
        ),
        ({"text_length_filter": [1]}, "operator 'text_length_filter': its arguments must be"),
    ],
)
def test_bad_arguments_name_the_operator_before_it_runs(item, message) -> None:
    from trinity.service.data_juicer.runner import OperatorArgumentError

    with pytest.raises(OperatorArgumentError) as caught:
        _runner([item], allow_code_operators=True)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_recipe_item_names_one_known_operator() -> None:
    from trinity.service.data_juicer.runner import RecipeError

    with pytest.raises(RecipeError, match=r"^process\[0\]: Data-Juicer has no operator 'nope'$"):
        _runner([{"nope": {}}])
    with pytest.raises(RecipeError, match=r"^process\[1\]: each item names one operator"):
        _runner([{"text_length_filter": {}}, {"a": {}, "b": {}}])


def test_a_failure_on_the_rows_names_the_operator_and_the_missing_field() -> None:
    from trinity.service.data_juicer.runner import OperatorFailed

    runner = _runner([{"text_length_filter": {"text_key": "question", "num_proc": 1}}])
    with pytest.raises(OperatorFailed) as caught:
        runner.run([{"text": "abc"}])
    assert str(caught.value).startswith("operator 'text_length_filter' failed on the rows: ")
    assert str(caught.value).endswith(
        "; text_key='question' names no field of the rows (they have: text)"
    )
