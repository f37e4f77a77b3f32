"""fms's data_formatter_template rendered as fms renders it, without jinja2 where none is needed."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.S)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ELEMENT_ITEM = re.compile(r"""element\s*\[\s*(['"])(.*?)\1\s*\]""", re.S)
ELEMENT_ATTR = re.compile(r"element\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
LEGACY_KEY = re.compile(r"""[^'"\[\]().|%,+*/~=<>!{}]+""")  # {{Tweet text}}: a name, not Jinja
# The names fms puts beside the record's fields when it renders a template
# (tokenizer.special_tokens_map); until the tokenizer is known they render as these defaults.
SPECIAL_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "additional_special_tokens",
)


class NeedsJinja(Exception):
    """The template needs full Jinja and jinja2 is not installed (on the host)."""


def _lookup(expr: str, record: dict, special: dict):
    """The value of one ``{{ expr }}``: a field, element['field'], element.field, a special
    token, or a field name with spaces ({{Tweet text}}). Anything else is Jinja's business."""
    e = expr.strip()
    if IDENT.fullmatch(e):
        if e in record:
            return record[e]
        if e in special:
            return special[e]
        raise KeyError(e)
    m = ELEMENT_ITEM.fullmatch(e) or ELEMENT_ATTR.fullmatch(e)
    if m:
        key = m.group(m.lastindex)
        if key in record:
            return record[key]
        raise KeyError(key)
    if LEGACY_KEY.fullmatch(e):
        if e in record:
            return record[e]
        raise KeyError(e)
    raise NeedsJinja


def _legacy_to_jinja(template: str, record: dict) -> str:
    """{{Tweet text}} -> {{ element['Tweet text'] }}, so Jinja can render the rest."""

    def sub(m):
        e = m.group(1).strip()
        if not IDENT.fullmatch(e) and LEGACY_KEY.fullmatch(e):
            return "{{ element[" + repr(e) + "] }}"
        return m.group(0)

    return PLACEHOLDER.sub(sub, template)


def render_template(template: str, record: dict, special: dict) -> str:
    """Render a data_formatter_template as fms 3.2.2 does (Jinja, StrictUndefined, with
    ``element`` = the record and the record's fields and the special tokens as names).
    Raises KeyError(name) for a field the record lacks."""
    if "{%" not in template and "{#" not in template:
        # Jinja's lexer: newlines normalised to \n, one trailing newline dropped.
        source = re.sub(r"\r\n|\r", "\n", template)
        if source.endswith("\n"):
            source = source[:-1]
        try:
            parts, at = [], 0
            for m in PLACEHOLDER.finditer(source):
                parts.append(source[at : m.start()])
                value = _lookup(m.group(1), record, special)
                parts.append("None" if value is None else str(value))
                at = m.end()
            parts.append(source[at:])
            return "".join(parts)
        except NeedsJinja:
            pass
    try:
        from jinja2 import StrictUndefined, UndefinedError
        from jinja2.sandbox import SandboxedEnvironment
    except ImportError:
        raise NeedsJinja from None
    env = SandboxedEnvironment(undefined=StrictUndefined)
    try:
        compiled = env.from_string(_legacy_to_jinja(template, record))
        return compiled.render(element=record, **{**special, **record})
    except UndefinedError as exc:
        name = re.search(r"'([^']*)' is undefined|has no attribute '([^']*)'", str(exc))
        key = next((g for g in name.groups() if g), str(exc)) if name else str(exc)
        raise KeyError(key) from None
    except Exception as exc:
        raise ValueError(f"cannot render data_formatter_template: {exc}") from None
