"""workloads.options (the torch-free list the scenario schema validates workload.args
against) must match the worker's real parser, option by option."""

from __future__ import annotations

import argparse

from workloads import options


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "flag"
    name = getattr(action.type, "__name__", None) or "str"
    return {"positive int": "positive_int", "positive float": "positive_float", "int": "int",
            "float": "float", "str": "str"}.get(name, name)


def test_options_table_matches_the_worker_parser():
    from workloads.train import build_parser

    parser = build_parser()
    parsed = {a.option_strings[0][2:]: _kind(a) for a in parser._actions
              if a.option_strings and a.option_strings[0].startswith("--")
              and a.dest != "help"}
    table = {**{k: "orchestrator" for k in options.ORCHESTRATOR}, **options.WORKER_ARGS}
    assert set(parsed) == set(table), (
        "workloads/options.py is out of date with workloads.train.build_parser(): "
        f"only in the parser {sorted(set(parsed) - set(table))}, "
        f"only in the table {sorted(set(table) - set(parsed))}")
    for name, kind in options.WORKER_ARGS.items():
        assert parsed[name] == kind, (name, parsed[name], kind)


def test_every_worker_arg_passes_the_parser_with_a_valid_value():
    """What the schema accepts, the worker's parser accepts (same flag spelling and type)."""
    from workloads.train import build_parser

    sample = {"flag": True, "positive_int": 3, "positive_float": 0.5, "int": -1,
              "float": 1.5, "str": "width=8"}
    base = ["--model", "mlp", "--dataset", "digits", "--method", "allreduce",
            "--batch-size", "8", "--seed", "0", "--log-dir", "/tmp", "--steps", "1"]
    for name, kind in options.WORKER_ARGS.items():
        options.check_arg(name.replace("-", "_"), sample[kind])
        extra = [f"--{name}"] if kind == "flag" else [f"--{name}", str(sample[kind])]
        build_parser().parse_args(base + extra)


def test_registry_train_sizes_match_the_datasets():
    """The schema refuses a batch larger than a rank's shard from these numbers."""
    from workloads import registry
    from workloads.datasets import load_dataset

    for name in registry.dataset_names():
        entry = registry.dataset_entry(name)
        if entry.train_samples is not None:
            assert len(load_dataset(name).train) == entry.train_samples, name
