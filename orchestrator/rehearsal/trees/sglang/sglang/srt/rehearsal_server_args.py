"""What every emulated release's `server_args.py` shares: the ServerArgs dataclass built from its
parser, the values SGLang fills in after parsing, and the speculative-decoding checks.

Each release's `srt/server_args.py` holds its own literal `parser.add_argument(...)` calls (a static
scan of that file finds exactly that release's flags); the dataclass fields are the parser's
destinations in order, so `server_args=ServerArgs(...)` prints that release's fields only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import sys
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger("sglang.srt.server_args")

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")


class DeprecatedStoreTrueAction(argparse.Action):
    """Deprecated flag that still stores True and prints a warning (0.5.14+; yellow, as SGLang's
    logger prints it before logging is set up)."""

    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        message = f"'{option_string}' is deprecated and will be removed in a future release.{replacement}"
        print(f"\033[1;33m{message}\033[0m", file=sys.stderr, flush=True)
        setattr(namespace, self.dest, True)


class ResolvedArgs:
    """Post-parse defaults; fields a release lacks are simply not there (hence getattr)."""

    def __post_init__(self):
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.mem_fraction_static is None:
            self.mem_fraction_static = 0.85 if self.tp_size < 4 else 0.81
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = 8192
        if self.page_size is None:
            self.page_size = 1
        if self.log_level_http is None:
            self.log_level_http = self.log_level
        if getattr(self, "cuda_graph_backend_decode", None) == "disabled":
            self.disable_cuda_graph = True
        if self.attention_backend is None:
            self.attention_backend = "fa3"
            logger.info("Attention backend not explicitly specified. Use fa3 backend by default.")
        if self.speculative_algorithm is not None:
            self._handle_speculative_decoding()
        max_bs_field = "cuda_graph_max_bs_decode" if hasattr(self, "cuda_graph_max_bs_decode") else "cuda_graph_max_bs"
        if getattr(self, max_bs_field) is None:
            setattr(self, max_bs_field, 160 if self.speculative_algorithm else 256)
        if getattr(self, "cuda_graph_max_bs_prefill", 16) is None:
            self.cuda_graph_max_bs_prefill = 16

    @property
    def graph_max_bs(self) -> int:
        """The largest CUDA graph batch (`--cuda-graph-max-bs`, `--cuda-graph-max-bs-decode` from 0.5.20)."""
        return getattr(self, "cuda_graph_max_bs_decode", None) or self.cuda_graph_max_bs

    def _handle_speculative_decoding(self):
        name = self.speculative_algorithm.upper()
        if name not in SPECULATIVE_ALGORITHMS:
            raise ValueError(
                f"Unknown speculative algorithm name: {self.speculative_algorithm}. "
                f"Registered algorithms: {', '.join(SPECULATIVE_ALGORITHMS)}"
            )
        self.speculative_algorithm = "EAGLE" if name == "NEXTN" else name
        if self.speculative_algorithm not in ("EAGLE", "EAGLE3"):
            raise ValueError(f"The rehearsal server only emulates EAGLE and EAGLE3, not {self.speculative_algorithm}.")
        if self.speculative_draft_model_path is None:
            raise ValueError("--speculative-draft-model-path is required for EAGLE speculative decoding")
        if self.speculative_algorithm == "EAGLE3" and self.speculative_token_map is not None:
            logger.warning("Speculative token map specified, but EAGLE3 models already have this. Ignoring the specified token map.")
            self.speculative_token_map = None
        if None in (self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens):
            steps, topk, draft_tokens = _auto_choose_speculative_params(self.model_path)
            if self.speculative_num_steps is None:
                self.speculative_num_steps = steps
            if self.speculative_eagle_topk is None:
                self.speculative_eagle_topk = topk
            if self.speculative_num_draft_tokens is None:
                self.speculative_num_draft_tokens = draft_tokens
        if self.speculative_eagle_topk == 1 and self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
            logger.warning(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
            self.speculative_num_draft_tokens = self.speculative_num_steps + 1
        self.max_running_requests = self.max_running_requests or 48

    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def _auto_choose_speculative_params(model_path: str) -> tuple[int, int, int]:
    """SGLang's auto defaults: (5, 4, 8) for Llama targets, (3, 1, 4) for everything else."""
    try:
        architectures = json.loads((Path(model_path) / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError):
        architectures = []
    if architectures and architectures[0] == "LlamaForCausalLM":
        return 5, 4, 8
    return 3, 1, 4


def server_args_class(add_cli_args: Callable[[argparse.ArgumentParser], None]) -> type:
    """The ServerArgs dataclass of a release: one field per parser destination, default as parsed."""
    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    fields: list[tuple[str, Any, Any]] = [
        (action.dest, Any, dataclasses.field(default=action.default))
        for action in parser._actions
        if action.dest != "help"
    ]
    server_args_cls = dataclasses.make_dataclass("ServerArgs", fields, bases=(ResolvedArgs,))
    server_args_cls.__module__ = "sglang.srt.server_args"
    return server_args_cls


def parse(server_args_cls: type, add_cli_args: Callable[[argparse.ArgumentParser], None], argv: list[str]):
    """argv -> ServerArgs, with the loggers set up first (their prefix depends on --tp-size)."""
    from sglang.srt.utils import configure_logger, rank_prefix

    parser = argparse.ArgumentParser()
    add_cli_args(parser)
    raw_args = parser.parse_args(argv)
    first_rank = raw_args.node_rank * max(1, raw_args.tp_size // max(1, raw_args.nnodes))  # this node's first rank
    configure_logger(raw_args.log_level, rank_prefix(first_rank, raw_args.tp_size, 0 if raw_args.dp_size > 1 else None))
    names = [field.name for field in dataclasses.fields(server_args_cls)]
    return server_args_cls(**{name: getattr(raw_args, name) for name in names})
