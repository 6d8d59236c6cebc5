"""Names read from files and folders (class folders, hosts files): one Unicode form, and the
characters no one can see found.

A name can differ from what it looks like. An accent is one character (``é``, U+00E9) or a
letter and a combining accent (``e`` + U+0301, as macOS writes file names); a zero-width space,
a byte-order mark an editor left, a control character are not seen at all, and some of them
crash what draws the name (matplotlib's PDF backend on a BOM). So:

* :func:`normal`: the name in NFC (an accent and its letter as one character where Unicode has
  one), so that two spellings of one name are one name;
* :func:`problem`: why a name cannot be used as it is: it holds an invisible character
  (Unicode's control ``Cc``, format ``Cf``, surrogate, private-use and unassigned code points,
  and the line and paragraph separators), or starts with a combining mark that has nothing to
  combine with; the character named by its code point and Unicode name (``U+200B (ZERO WIDTH
  SPACE)``), which is how a user finds it;
* :func:`visible`: the name with each invisible character written out as ``<U+200B>``: what
  the report draws (:mod:`clusterbench.report.theme`).

Standard library only.
"""

from __future__ import annotations

import unicodedata

#: The Unicode categories of characters that are not seen: controls, formats (zero-width
#: space and joiners, the byte-order mark, direction marks), surrogates, private use,
#: unassigned, the line and paragraph separators.
INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
#: The categories of combining marks.
MARKS = frozenset({"Mn", "Mc", "Me"})
#: Kept as they are by :func:`visible`: the report lays out its own text in lines.
LAYOUT = frozenset("\n")


def normal(name: str) -> str:
    """``name`` in Unicode's composed normal form (NFC)."""
    return unicodedata.normalize("NFC", name)


def describe(char: str) -> str:
    """``U+200B (ZERO WIDTH SPACE)``: a character by its code point and Unicode name."""
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else "")


def is_invisible(char: str) -> bool:
    return unicodedata.category(char) in INVISIBLE


def invisible(name: str) -> list[str]:
    """The distinct invisible characters of ``name``, in order."""
    return list(dict.fromkeys(c for c in name if is_invisible(c)))


def problem(name: str) -> str | None:
    """Why ``name`` cannot be used as it is (module docstring), in words that name the
    character; None when it can."""
    hidden = invisible(name)
    if hidden:
        shown = ", ".join(describe(c) for c in hidden[:3])
        more = f" and {len(hidden) - 3} more" if len(hidden) > 3 else ""
        return f"holds {shown}{more}, an invisible or control character"
    text = normal(name)
    if text and unicodedata.category(text[0]) in MARKS:
        return f"starts with {describe(text[0])}, a combining mark with no letter to combine with"
    return None


def visible(text: str) -> str:
    """``text`` in NFC with each invisible character but a line break written as ``<U+XXXX>``
    (ASCII: every font has it)."""
    text = normal(text)
    if text.isascii() and text.isprintable():
        return text
    return "".join(f"<U+{ord(c):04X}>" if is_invisible(c) and c not in LAYOUT else c for c in text)
