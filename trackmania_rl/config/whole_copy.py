"""A config file written out whole: the text a run's live config gets (the file may name a `base`, loader.py).

A file without a base is its own text, unchanged. A file with one becomes its base's whole text (the first file of
the chain; each later file applied to the text before it), where each setting the file sets is put in place:

- the base's statement of that setting is replaced by the file's own statement, with the comment lines directly
  above it (no blank line between) and its trailing comment; the base's comment lines above are kept, and so is its
  trailing comment when the file's statement has no comment at all (markers such as `[restart]`, units);
- the file's docstring replaces the base's, followed by a comment saying which files the text was written from;
- a setting the base does not set goes right after that comment;
- a statement that cannot stand alone (it reads a helper name of its file, say) is written as its value
  (`name = <repr>`), and so is a setting the base sets in some other way than one plain `name = ...` line, then at
  the end of the text.

The text is then run and must give exactly the settings the loader resolves from the files (compared by `repr`, so
1, 1.0 and True differ); a setting where it does not (a base statement that reads a setting the file replaced) is
written as its value, and a text that still differs is refused with a ConfigError. So a run's live copy is
equivalent to the file it was started from, and the user sees and edits every setting in force.
"""

from __future__ import annotations

import ast
import builtins
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

from trackmania_rl.config.loader import (
    BASE,
    REPO_ROOT,
    config_files,
    read_config_files,
    read_python_file,
    settings_of,
)
from trackmania_rl.config.schema import ConfigError


@dataclass(frozen=True)
class _Statement:
    """A top-level `name = value` of a config text that has its lines to itself (0-based, `last` included)."""

    first: int
    last: int
    leading: tuple[str, ...]  # the comment lines directly above it
    comment: str | None  # the comment on its last line, `#` included
    node: ast.Assign


class _Text:
    """A config file's text, parsed: its lines, docstring lines and the statements that can be replaced in place."""

    def __init__(self, text: str, label: str):
        self.label = label
        # lines as ast numbers them: str.splitlines() would also split at form feeds and other separators in strings
        self.lines = [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []
        try:
            tree = ast.parse(text, filename=label)
        except SyntaxError as e:
            raise ConfigError(f"config file {label} does not parse: line {e.lineno}: {e.msg}") from None
        comments = {}
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0] - 1] = token.string
        body = tree.body
        self.docstring = None  # (first, last) lines
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            self.docstring = (body[0].lineno - 1, body[0].end_lineno - 1)
        bound: dict[str, list[int]] = {}
        for i, node in enumerate(body):
            for name in _bound_names(node):
                bound.setdefault(name, []).append(i)
        self.bound = set(bound)
        self.statements: dict[str, _Statement] = {}
        for name, where in bound.items():
            if len(where) != 1:
                continue
            i = where[0]
            node = body[i]
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            first, last = node.lineno - 1, node.end_lineno - 1
            above = body[i - 1].end_lineno - 1 if i else -1
            below = body[i + 1].lineno - 1 if i + 1 < len(body) else len(self.lines)
            if above >= first or below <= last:  # shares a line with another statement (`a = 1; b = 2`)
                continue
            top = first
            while top - 1 > above and self.lines[top - 1].lstrip().startswith("#"):
                top -= 1
            self.statements[name] = _Statement(first, last, tuple(self.lines[top:first]), comments.get(last), node)


def _bound_names(statement: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds (function and class bodies are not entered)."""
    names, stack = set(), [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        stack.extend(ast.iter_child_nodes(node))
    return names


def _same(a, b) -> bool:
    return type(a) is type(b) and repr(a) == repr(b)


_UNSET = object()


def _alone(node: ast.Assign, label: str):
    """The value of a statement's expression evaluated on its own (no other name of its file), or _UNSET."""
    try:
        return eval(compile(ast.Expression(node.value), label, "eval"), {"__builtins__": builtins})  # the user's own file
    except Exception:
        return _UNSET


def _with_comment(line: str, comment: str | None) -> str:
    return f"{line}  {comment}" if comment else line


def _block(name: str, value, own: _Statement | None, own_text: _Text | None, replaced: _Statement | None) -> list[str]:
    """The lines that set `name` to `value` in the whole text: the file's own statement when it stands alone, else
    the value written out; with the file's comments (the replaced statement's trailing one when the file has none)."""
    bare = own is None or (not own.comment and not own.leading)  # the file says nothing of it: the base's comment stays
    comment = replaced.comment if bare and replaced is not None else own.comment if own is not None else None
    if own is not None and _same(_alone(own.node, own_text.label), value):
        lines = own_text.lines[own.first : own.last + 1]
        if not own.comment and comment:
            lines = [*lines[:-1], _with_comment(lines[-1], comment)]
        return [*own.leading, *lines]
    leading = own.leading if own is not None else ()
    return [*leading, _with_comment(f"{name} = {value!r}", comment)]


def _apply(base: _Text, values: dict, own: _Text | None, note: list[str]) -> str:
    """`base`'s text with `values` put in place (each by `own`'s statement of it if any), `own`'s docstring in place
    of the base's, and `note` after the docstring."""
    replace: dict[int, tuple[int, list[str]]] = {}  # first line -> (last line, new lines)
    top: list[str] = []
    end: list[str] = []
    for name, value in values.items():
        mine = own.statements.get(name) if own is not None else None
        theirs = base.statements.get(name)
        lines = _block(name, value, mine, own, theirs)
        if theirs is not None:
            replace[theirs.first] = (theirs.last, lines)
        elif name in base.bound:  # set in some other way: a later statement overrides it
            end += lines
        else:
            top += lines
    header = base.lines[base.docstring[0] : base.docstring[1] + 1] if base.docstring is not None else []
    if own is not None and own.docstring is not None:
        header = own.lines[own.docstring[0] : own.docstring[1] + 1]
    inserted = [*note, *([""] if note and top else []), *top]
    if inserted:
        header = [*header, "", *inserted] if header else inserted
    out = []
    if base.docstring is not None:
        replace[base.docstring[0]] = (base.docstring[1], header)
    elif header:
        out += [*header, ""]
    i = 0
    while i < len(base.lines):
        if i in replace:
            last, lines = replace[i]
            out += lines
            i = last + 1
        else:
            out.append(base.lines[i])
            i += 1
    if end:
        out += ["", "# Set here, after the base's own statements of them:", *end]
    return "\n".join(out) + "\n"


def _shown(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(resolved)


def _note(files: list[Path]) -> list[str]:
    *bases, path = files
    return [
        f"# Written whole from {_shown(path)} over {' over '.join(_shown(b) for b in reversed(bases))}.",
        f"# {path.name} names only what differs from its base: this is the base's text with those settings in place, so",
        "# every setting in force is in this file.",
    ]


def _run(text: str, label: str) -> dict:
    namespace: dict = {"__name__": "__config__"}
    try:
        exec(compile(text, label, "exec"), namespace)  # the text of files the user named
    except Exception as e:
        raise ConfigError(f"{label} raised {type(e).__name__}: {e}") from None
    return settings_of(namespace)


def whole_config_text(path: str | Path) -> str:
    """The whole text of config file `path`: its own text if it names no base, else as the module's docstring says.
    ConfigError if the files are unusable or no whole text gives the same settings."""
    files = config_files(path)
    if len(files) == 1:
        return files[0].read_text()
    text = files[0].read_text()
    for i, file in enumerate(files[1:], start=1):
        own = _Text(file.read_text(), str(file))
        values = {k: v for k, v in read_python_file(file).items() if k != BASE}
        text = _apply(_Text(text, str(files[0])), values, own, _note(files[: i + 1]) if i == len(files) - 1 else [])
    label = f"the whole copy of {path}"
    expected = read_config_files(files)
    for _ in range(2):
        got = _run(text, label)
        differ = {name: value for name, value in expected.items() if name not in got or not _same(got[name], value)}
        extra = sorted(set(got) - set(expected))
        if not differ and not extra:
            return text
        if extra:
            break
        text = _apply(_Text(text, label), differ, None, [])  # those settings written as their values
    raise ConfigError(
        f"config file {path}: its whole copy does not give the settings it resolves to ({', '.join(extra or sorted(differ))}): "
        "write them as plain values in their files"
    )
