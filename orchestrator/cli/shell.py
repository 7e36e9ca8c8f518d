"""`orch completion bash|zsh|fish`: the shell's completion script (cli/completing.py makes it)."""

from __future__ import annotations

import sys

import typer

from . import completing
from .app import app


@app.command()
def completion(shell: str = typer.Argument(..., metavar="SHELL", help="bash, zsh or fish.")) -> None:
    """Print the completion script of a shell: commands, options, run ids and experiment names
    complete on Tab. bash: `eval "$(orch completion bash)"` in ~/.bashrc; zsh: the same in ~/.zshrc;
    fish: `orch completion fish > ~/.config/fish/completions/orch.fish`."""
    sys.stdout.write(completing.script(shell, app))
