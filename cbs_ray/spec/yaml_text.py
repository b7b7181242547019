"""Parsing a spec's YAML within bounds. A spec is a small mapping of plain values, so whatever it never needs
is refused, with one line naming where: anchors and aliases (seven levels of ``&a [*b, …]``, 602 bytes,
expanded into a 183 MB spec), nesting deeper than ``MAX_DEPTH`` (20 000 levels ended in a ``RecursionError``),
a key given twice in one mapping (YAML would keep the last silently), and a file over ``MAX_SPEC_BYTES``."""

from __future__ import annotations

import yaml

__all__ = ["MAX_DEPTH", "MAX_SPEC_BYTES", "SpecYAMLError", "parse"]

MAX_SPEC_BYTES = 1_000_000
"""1 MB: the largest shipped spec is under 5 KB; a 50 MB file took 203 s of CPU before this limit."""
MAX_DEPTH = 32
"""Nesting levels of maps and lists: the deepest a spec goes is 4 (``model.config`` of a nested config)."""


class SpecYAMLError(yaml.YAMLError):
    """YAML a spec never needs; the message says what and where."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses anchors, aliases, deep nesting and duplicate keys while composing."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise SpecYAMLError(f"anchors and aliases (&, *) are not allowed in a spec{_at(event)}")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise SpecYAMLError(f"nested deeper than {MAX_DEPTH} levels{_at(event)}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise SpecYAMLError(f"key {key!r} given twice in one mapping{_at(key_node)}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _at(event_or_node) -> str:
    mark = getattr(event_or_node, "start_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""


def parse(text: str):
    """The YAML value of ``text`` (a whole spec file, or one ``--set`` value) within the bounds above;
    ``SpecYAMLError`` for what a spec never needs, ``yaml.YAMLError`` for YAML that is not valid."""
    if len(text.encode()) > MAX_SPEC_BYTES:
        raise SpecYAMLError(f"larger than {MAX_SPEC_BYTES // 1_000_000} MB ({len(text.encode())} bytes); a spec "
                            f"is a few KB")
    return yaml.load(text, Loader=_BoundedLoader)
