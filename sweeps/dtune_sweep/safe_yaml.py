"""Reading a sweep file's YAML without trusting it. The bytes must be UTF-8 and at most
MAX_FILE_BYTES; the composed node graph is checked before any Python object is built: aliases may
not expand the document past MAX_VALUES values (an alias bomb, "billion laughs", is refused without
being expanded), nesting is at most MAX_DEPTH levels, no anchor is used inside itself, and no
mapping gives a key twice (PyYAML would keep the last one silently). Every refusal is a SweepError
naming the file and the key path, e.g. `s.yaml: sweeps[0].axes.--batch: ...`.
"""

from __future__ import annotations

import yaml

MAX_FILE_BYTES = 1 << 20
MAX_VALUES = 100_000
MAX_DEPTH = 32
_MERGE_TAG = "tag:yaml.org,2002:merge"


class SweepError(Exception):
    """A sweep file that cannot be run; the message says where and what to change (exit 2)."""


def key_path(parts) -> str:
    """['sweeps', 0, 'axes', '--batch'] -> 'sweeps[0].axes.--batch'; keys that are not strings
    show as [1], [None], [True]."""
    out = ""
    for p in parts:
        if isinstance(p, str):
            out += ("." if out else "") + p
        else:
            out += f"[{p!r}]"
    return out or "(top level)"


def _line(node) -> str:
    return f"line {node.start_mark.line + 1}"


def _check(node, path: list, depth: int, memo: dict, active: set, file: str) -> int:
    """The number of values `node` stands for once aliases are expanded (memoised per node, so
    shared subtrees are counted without being walked again)."""
    if id(node) in memo:
        return memo[id(node)]
    if id(node) in active:
        raise SweepError(
            f"{file}: {key_path(path)}: a recursive alias ({_line(node)}: an anchor used "
            f"inside itself); write the values out"
        )
    if depth > MAX_DEPTH:
        raise SweepError(
            f"{file}: {key_path(path)}: nested more than {MAX_DEPTH} levels deep "
            f"({_line(node)}); a sweep file needs at most a few"
        )
    active.add(id(node))
    n = 1
    if isinstance(node, yaml.MappingNode):
        seen = {}
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else "?"
            if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE_TAG:
                if (k.tag, k.value) in seen:
                    raise SweepError(
                        f"{file}: {key_path(path + [name])}: given twice in one mapping "
                        f"({seen[(k.tag, k.value)]} and {_line(k)}); keep one"
                    )
                seen[(k.tag, k.value)] = _line(k)
            n += _check(k, path + [name], depth + 1, memo, active, file)
            n += _check(v, path + [name], depth + 1, memo, active, file)
            if n > MAX_VALUES:
                break
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            n += _check(v, path + [i], depth + 1, memo, active, file)
            if n > MAX_VALUES:
                break
    if n > MAX_VALUES:
        raise SweepError(
            f"{file}: {key_path(path)}: expands to more than {MAX_VALUES:,} values "
            f"({_line(node)}; aliases of aliases, an alias bomb?); write a smaller sweep"
        )
    active.discard(id(node))
    memo[id(node)] = n
    return n


def _check_depth(text: str, file: str) -> None:
    """Refuses nesting deeper than MAX_DEPTH from the event stream (PyYAML's parser is iterative;
    its composer recurses, so this runs first), naming the key path where it happens."""
    stack = []  # per open collection: [is_mapping, current key or index, expecting a key]
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.NodeEvent):
            if stack:
                top = stack[-1]
                if top[0]:
                    if top[2]:
                        top[1] = ev.value if isinstance(ev, yaml.ScalarEvent) else "?"
                    top[2] = not top[2]
                else:
                    top[1] += 1
            if isinstance(ev, yaml.CollectionStartEvent):
                if len(stack) >= MAX_DEPTH:
                    raise SweepError(
                        f"{file}: {key_path([f[1] for f in stack])}: nested more than "
                        f"{MAX_DEPTH} levels deep (line {ev.start_mark.line + 1}); a "
                        f"sweep file needs at most a few"
                    )
                stack.append([isinstance(ev, yaml.MappingStartEvent), -1, True])
        elif isinstance(ev, yaml.CollectionEndEvent):
            stack.pop()


def _text(file: str, data: bytes) -> str:
    if len(data) > MAX_FILE_BYTES:
        raise SweepError(
            f"{file}: {len(data):,} bytes; a sweep file may have at most "
            f"{MAX_FILE_BYTES:,} (write fewer values, or several files)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise SweepError(
            f"{file}: line {line}: byte {e.start} ({data[e.start]:#04x}) is not UTF-8; save the file as UTF-8"
        ) from None


def load_yaml(file: str):
    """The document of a sweep file as Python objects (None for an empty file)."""
    try:
        with open(file, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise SweepError(f"{file}: cannot read ({e.strerror})") from None
    # The pure-Python loader: its composer recurses in Python (a RecursionError, not a crash in C,
    # should _check_depth ever let too deep a document through).
    text = _text(file, data)
    loader = yaml.SafeLoader(text)
    try:
        _check_depth(text, file)
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node, [], 0, {}, set(), file)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark or e.context_mark
        where = f"line {m.line + 1}, column {m.column + 1}" if m else "?"
        if isinstance(e, yaml.constructor.ConstructorError):
            raise SweepError(
                f"{file}: YAML error at {where}: {e.problem or e.context}; a sweep file "
                f"holds plain mappings, lists, strings and numbers"
            ) from None
        raise SweepError(f"{file}: YAML syntax error at {where}: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise SweepError(f"{file}: YAML error: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    except RecursionError:
        raise SweepError(
            f"{file}: nested more than {MAX_DEPTH} levels deep; a sweep file needs at most a few"
        ) from None
    finally:
        loader.dispose()
