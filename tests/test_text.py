"""Outside text through cli/text.py prints as it is: markup escaped, and a trailing backslash (a
script's continuation, a path) neither doubled where nothing follows nor eating the tag after it."""

from __future__ import annotations

import pytest
from rich.text import Text

from orchestrator.cli.text import block, line


@pytest.mark.parametrize("outside", ["end \\", "two\\\\", "[bold]not markup[/]\\", "\\", "a\\b", "plain"])
@pytest.mark.parametrize("around", ["{}", "[dim]{}[/] after", "[bold]x[/] {}"])
def test_outside_text_prints_as_written_whatever_markup_is_around_it(outside, around):
    expected = around.replace("[dim]", "").replace("[/]", "").replace("[bold]", "").format(outside)
    for escaped in (line(outside), block(outside)):
        assert Text.from_markup(around.format(escaped)).plain == expected
