"""The ``trinity`` command.

    trinity run --config examples/arithmetic/grpo.yaml            # train
    trinity run --config FILE --dry-run                           # validate, show the plan
    trinity run --config FILE algorithm.optimizer.lr=1e-5         # dotted overrides
    trinity convert --checkpoint-dir CHECKPOINT_JOB_DIR           # to Hugging Face format
    trinity debug --config FILE --module inference_model          # serve the model (OpenAI API)
    trinity debug --config FILE --module workflow --output-file F # run the workflow on a few tasks

Configuration mistakes are reported on one line naming the key, exit code 2; a run
stopped with Ctrl-C says where its checkpoints are, exit code 130.
"""

from __future__ import annotations

import argparse
import logging
import sys

from trinity.cli.command import (
    EXIT_CONFIG_ERROR,
    EXIT_INTERRUPTED,
    load_external_libs,
    load_plugins,
)
from trinity.cli.debug import add_debug_parser
from trinity.cli.log import add_log_parser
from trinity.cli.studio import add_studio_parser
from trinity.cli.view import add_view_parser


def _cmd_run(args: argparse.Namespace) -> int:
    from trinity.launch.process_policy import apply_to_driver

    apply_to_driver()  # this process is the run's driver: before torch and Ray are imported
    from trinity.config import ConfigError, dry_run_report, job_dir, load_config, read_config
    from trinity.config.lookups import check_lookups
    from trinity.config.no_effect import describe, set_without_effect

    load_plugins(args.plugin_dir)
    try:
        config = load_config(args.config, args.overrides)
        load_external_libs(config.trainer)
        # the names and data paths the run will look up, on this machine, with the plugins
        check_lookups(config)
        # what the file and overrides set, before resolve fills in the rest
        no_effect = set_without_effect(read_config(args.config, args.overrides))
    except ConfigError as err:
        print(f"trinity: config error: {err}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except FileNotFoundError as err:
        print(f"trinity: config error: {err}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    from trinity.utils.cpu import float32_where_bf16_is_slow

    dtype_note = float32_where_bf16_is_slow(config)
    if dtype_note:
        print(f"trinity: {dtype_note}", file=sys.stderr)
    if args.dry_run:
        print(dry_run_report(config, no_effect=no_effect))
        return 0
    if no_effect:
        print(f"trinity: {describe(no_effect)}", file=sys.stderr)
    from trinity.launch.cluster import ClusterError
    from trinity.launch.run import RunError, run

    try:
        run(config, plugin_dirs=args.plugin_dir)
    except (RunError, ClusterError) as err:
        print(f"trinity: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"trinity: interrupted; {job_dir(config)} keeps the checkpoints saved so far "
            "(run again with continue_from_checkpoint: true to resume after the latest)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from trinity.trainer.convert import ConvertError, convert

    try:
        converted = convert(args.checkpoint_dir, base_model_dir=args.base_model_dir)
    except ConvertError as err:
        print(f"trinity: {err}", file=sys.stderr)
        return 1
    for path, status in converted:
        print(f"{status}: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trinity",
        description="Reinforcement fine-tuning of language models: explore, buffer, train, synchronize.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run an experiment described by a YAML config",
        description="Run the experiment in --config: explorer, buffer, trainer and synchronizer on Ray "
        "(a local Ray instance is started unless one is running or cluster.ray_address names one).",
    )
    run.add_argument("--config", required=True, help="path to the YAML config file")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the config, print the resolved config and the batch arithmetic, and exit",
    )
    run.add_argument(
        "--plugin-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="import the Python modules in DIR first (custom workflows, rewards, algorithm parts); repeatable",
    )
    run.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="dotted overrides applied after the file, e.g. algorithm.optimizer.lr=1e-5",
    )
    run.set_defaults(func=_cmd_run)

    convert = sub.add_parser(
        "convert",
        help="convert trainer checkpoints to Hugging Face format",
        description="Write actor/huggingface/model.safetensors for every global_step_* checkpoint under "
        "--checkpoint-dir (a job dir, one global_step_N dir, or a path inside one); already converted "
        "steps are skipped.",
    )
    convert.add_argument(
        "--checkpoint-dir", required=True, help="job dir, global_step_N dir, or a path inside one"
    )
    convert.add_argument(
        "--base-model-dir",
        default=None,
        help="base model whose config.json and tokenizer to use when a checkpoint lacks them",
    )
    convert.set_defaults(func=_cmd_convert)

    add_debug_parser(sub)
    add_studio_parser(sub)
    add_log_parser(sub)
    add_view_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
