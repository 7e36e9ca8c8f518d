"""YAML documents that remember where each key was written, so errors can say file:line."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import SpecError


class Located(dict[str, Any]):
    """A mapping from a YAML file; `line_of(key)` gives the 1-based line a key was written on."""

    def __init__(self, *args: Any, source: str = "?", line: int = 0):
        super().__init__(*args)
        self.source = source
        self.line = line
        self.lines: dict[str, int] = {}

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.line)

    def where(self, key: str | None = None) -> str:
        return f"{self.source}:{self.line_of(key) if key else self.line}"


# Limits a page of experiment or inventory text stays far below, so that a hostile or broken file is
# one line in well under a second instead of a recursion crash or gigabytes of expanded aliases.
MAX_INTEGER = 2**63 - 1  # a count, port or byte size; beyond it nothing (SQLite included) stores it
MAX_INTEGER_TEXT = 80  # characters: 0b and 64 binary digits with room; checked before converting
MAX_DEPTH = 64  # mappings and lists inside each other
MAX_ALIAS_VALUES = 10_000  # values that aliases add by repeating their anchors (billion laughs)


class _Loader(yaml.SafeLoader):
    source = "?"

    def __init__(self, text: str):
        super().__init__(text)
        self.depth = 0
        self.alias_values = 0  # values added by aliases so far
        self.sizes: dict[int, int] = {}  # id(node) -> values in it with aliases expanded, once complete

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        """The scanner's own count of open `[` and `{`: checked here as well, since it reads up to a
        line's 1024 characters ahead of the parser, slower with each bracket still open."""
        super().fetch_flow_collection_start(TokenClass)
        if self.flow_level > MAX_DEPTH:
            raise SpecError(f"{self.source}:{self.line + 1}: values are nested more than {MAX_DEPTH} deep; "
                            "flatten the mapping or list")

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            return self._compose_alias(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise SpecError(f"{self._here()}: values are nested more than {MAX_DEPTH} deep; "
                                "flatten the mapping or list")
            node: Any = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        self.sizes[id(node)] = 1 + sum((self.sizes[id(child)] for child in _children(node)), 0)
        return node

    def _compose_alias(self, parent: Any, index: Any) -> Any:
        event: Any = _peek(self)
        node = super().compose_node(parent, index)  # the anchor's node (or PyYAML's undefined-alias error)
        size = self.sizes.get(id(node))
        where = f"{self.source}:{event.start_mark.line + 1}"
        if size is None:  # the anchor is still being read: the value would contain itself
            raise SpecError(f"{where}: alias *{event.anchor} is used inside its own anchor (a value that "
                            "contains itself); write the value out")
        self.alias_values += size
        if self.alias_values > MAX_ALIAS_VALUES:
            raise SpecError(f"{where}: alias *{event.anchor} makes the file expand to more than "
                            f"{MAX_ALIAS_VALUES} values (aliases repeat their anchor's whole value); "
                            "use fewer aliases or write the values out")
        return node

    def _here(self) -> str:
        event: Any = _peek(self)
        return f"{self.source}:{event.start_mark.line + 1}"


def _peek(loader: Any) -> Any:
    """The next event of the loader's stream (PyYAML's peek_event carries no type annotations)."""
    return loader.peek_event()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> Located:
    loader.flatten_mapping(node)
    result = Located(source=loader.source, line=node.start_mark.line + 1)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            key = str(key)
        if key in result:
            raise SpecError(
                f"{loader.source}:{key_node.start_mark.line + 1}: key {key!r} is written twice; keep one"
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


def _construct_text(loader: _Loader, node: yaml.ScalarNode) -> str:
    """A string, which must be Unicode text: a `"\\udcff"` escape makes a lone surrogate, which no
    file, command line or database takes."""
    text = loader.construct_scalar(node)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(f"{loader.source}:{node.start_mark.line + 1}: {text[:60]!r} is not Unicode text (a lone "
                        "surrogate escape such as \\udcff); write the character itself") from None
    return text


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    """An integer of sane size: the text's length is checked before Python converts it, since a long
    hexadecimal or base-60 (`1:2:3`) text converts without Python's own digit limit."""
    text = str(node.value)
    if len(text) <= MAX_INTEGER_TEXT:
        value = int(yaml.SafeLoader.construct_yaml_int(loader, node))
        if abs(value) <= MAX_INTEGER:
            return value
    shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text)} characters)"
    raise SpecError(f"{loader.source}:{node.start_mark.line + 1}: integer {shown} is beyond a sane size "
                    f"(at most {MAX_INTEGER}); write a smaller number, or quote it to make it text")


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:str", _construct_text)


MAX_BYTES = 4 << 20  # an experiment or inventory is a page of text; a bigger file is a wrong path


def load(path: Path) -> Located:
    """Read a YAML mapping; anything but a readable UTF-8 text file of sane size is a SpecError
    naming the file (and line) and what to do."""
    return loads(read_text(path), str(path))


def read_text(path: Path) -> str:
    try:
        if path.is_dir():
            raise SpecError(f"{path}: is a folder, not a YAML file; give the file's path")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SpecError(f"{path}: {size} bytes is too big for an experiment or inventory file "
                            f"(at most {MAX_BYTES >> 20} MiB); check the path")
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(f"{path}: file not found; check the path") from None
    except PermissionError:
        raise SpecError(f"{path}: not readable (permission denied); check its mode") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read it ({exc.strerror or exc}); check the path") from None
    if b"\0" in data:
        raise SpecError(f"{path}: is a binary file, not YAML; check the path")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SpecError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8") from None


def loads(text: str, source: str) -> Located:
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:  # the reader checks the whole text first (control characters)
        line = text[:exc.position].count("\n") + 1
        character = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise SpecError(f"{source}:{line}: character {character!r} is not allowed in YAML; remove it") from None
    loader.source = source
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f":{mark.line + 1}" if mark else ""
        hint = "; indent with spaces, not tabs" if "\t" in _line(text, mark) else ""
        raise SpecError(f"{source}{at}: YAML syntax error: {exc.problem}{hint}") from None
    except yaml.YAMLError as exc:  # a reader error (a control character) carries no problem mark
        raise SpecError(f"{source}: not valid YAML text: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()
    if data is None:
        raise SpecError(f"{source}:1: the file is empty; write its keys (docs/experiments.md, docs/inventory.md)")
    if not isinstance(data, Located):
        raise SpecError(f"{source}:1: expected a mapping of keys at the top level, got {type(data).__name__}")
    return data


def _line(text: str, mark: Any) -> str:
    lines = text.splitlines()
    return lines[mark.line] if mark is not None and 0 <= mark.line < len(lines) else ""


def require_mapping(value: object, where: str, what: str) -> Located:
    if isinstance(value, Located):
        return value
    if not isinstance(value, dict):
        raise SpecError(f"{where}: {what} must be a mapping (key: value), got {type(value).__name__}")
    return Located(value)  # a default orch wrote itself (`or {}`): no lines to remember


def check_keys(data: Located, allowed: set[str], what: str) -> None:
    for key in data:
        if key not in allowed:
            raise SpecError(f"{data.where(key)}: unknown key {key!r} in {what}; {did_you_mean(key, allowed)}")


def did_you_mean(word: str, choices: set[str] | list[str] | tuple[str, ...]) -> str:
    """`did you mean 'x'?` when one choice is close, else the list of choices."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return "known: " + ", ".join(sorted(choices))
