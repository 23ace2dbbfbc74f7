"""The Data-Juicer operators the service runs for anyone who holds its token.

Data-Juicer's recipes are code as much as data: ``python_lambda_mapper`` evaluates the
lambda it is given, ``python_file_mapper`` and ``image_ohem_selector`` import a Python
file, ``remove_repeat_sentences_mapper`` evaluates a ``tokenizer`` lambda, model-based
operators load whatever model (and, with ``trust_remote_code``, whatever code) a recipe
names, and some operators read or write the files and URLs they are given. The service
therefore runs, unless started with ``--allow-code-operators``
(``service.data_juicer.allow_code_operators``), only the operators below: text filters,
mappers, deduplicators and selectors of Data-Juicer 1.x that take data arguments only
(lengths, ratios, patterns, field names) and load no model. Of those, the arguments in
``REFUSED_ARGS`` (and any argument of ``REFUSED_ARGS_OF`` other than its default) would
still read or write a file, load a model or run code, and are refused too.

The in-process ``data_juicer`` operator (``runner.DataJuicerRunner`` without
``allow_code_operators=False``) runs any operator: its recipe comes from the run's own
config.
"""

from __future__ import annotations

from typing import Any

CONFIG_KEY = "service.data_juicer.allow_code_operators"

FILTERS = (
    "alphanumeric_filter",
    "average_line_length_filter",
    "character_repetition_filter",
    "maximum_line_length_filter",
    "special_characters_filter",
    "specified_field_filter",
    "specified_numeric_field_filter",
    "suffix_filter",
    "text_length_filter",
    "word_repetition_filter",
    "words_num_filter",
)
MAPPERS = (
    "clean_copyright_mapper",
    "clean_email_mapper",
    "clean_html_mapper",
    "clean_ip_mapper",
    "clean_links_mapper",
    "expand_macro_mapper",
    "extract_tables_from_html_mapper",
    "fix_unicode_mapper",
    "latex_figure_context_extractor_mapper",
    "pii_redaction_mapper",
    "punctuation_normalization_mapper",
    "remove_bibliography_mapper",
    "remove_comments_mapper",
    "remove_header_mapper",
    "remove_long_words_mapper",
    "remove_non_chinese_character_mapper",
    "remove_repeat_sentences_mapper",
    "remove_specific_chars_mapper",
    "remove_table_text_mapper",
    "replace_content_mapper",
    "whitespace_normalization_mapper",
)
DEDUPLICATORS = (
    "document_deduplicator",
    "document_line_deduplicator",
    "document_minhash_deduplicator",
    "document_simhash_deduplicator",
)
SELECTORS = (
    "frequency_specified_field_selector",
    "random_selector",
    "range_specified_field_selector",
    "tags_specified_field_selector",
    "topk_specified_field_selector",
)
ALLOWED_OPERATORS = frozenset(FILTERS + MAPPERS + DEDUPLICATORS + SELECTORS)

# operators that run code the recipe gives; never in the allowlist (named in messages)
CODE_OPERATORS = frozenset({"python_lambda_mapper", "python_file_mapper", "image_ohem_selector"})

# arguments of every operator that write files or set up environments
REFUSED_ARGS = frozenset({"work_dir", "stats_export_path", "runtime_env"})

# arguments that, away from their default, load a model or file, or evaluate code
REFUSED_ARGS_OF = {
    "alphanumeric_filter": ("tokenization",),
    "document_minhash_deduplicator": ("tokenization", "tokenizer_model"),
    "remove_repeat_sentences_mapper": ("tokenizer",),
    "word_repetition_filter": ("tokenization",),
    "words_num_filter": ("tokenization",),
}


class OperatorRefused(ValueError):
    """A recipe names an operator, or an argument, outside the allowlist."""


def check_allowed(name: str, args: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Raise ``OperatorRefused`` unless operator ``name`` with ``args`` is allowed;
    ``defaults``: the operator's argument defaults (its signature's)."""
    hint = f"set {CONFIG_KEY}: true (--allow-code-operators) to allow it"
    if name not in ALLOWED_OPERATORS:
        what = "runs code the recipe gives" if name in CODE_OPERATORS else "is not data-only"
        raise OperatorRefused(
            f"operator '{name}' {what}: the Data-Juicer service runs only the operators of "
            f"trinity/service/data_juicer/allowlist.py; {hint}"
        )
    for arg, value in args.items():
        own = arg in REFUSED_ARGS_OF.get(name, ()) and value != defaults.get(arg)
        if arg in REFUSED_ARGS or own:
            raise OperatorRefused(
                f"operator '{name}': argument {arg}={value!r} reads or writes files, loads a "
                f"model or runs code, which the Data-Juicer service refuses; {hint}"
            )
