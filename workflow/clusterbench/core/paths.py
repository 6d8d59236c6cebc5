"""The path keys of the config (``download.cache_dir``, ``staging.dir``, ``history.path``):
``~``, ``~user`` and ``$VARIABLES`` expanded, one way for all of them (:func:`expand`), and a
user or a variable that does not exist refused, naming the key. Without that a path keeps the
text it could not expand: ``$NOPE/h.sqlite`` made a folder named ``$NOPE``, ``~nosuchuser/x``
one named ``~nosuchuser``, under the working directory.

The schema tags each path key with ``x-path``: ``here`` (expanded where the config is read:
checked with the config, before any job: :func:`clusterbench.config.problems.path_problems`)
or ``node`` (expanded on each node when the run starts, where the variables are the node's:
``$TMPDIR``; checked there, by the step that expands it, before it writes anything).

:func:`cannot_make_in` says why nothing can be made in a folder (tried, not guessed), for the
keys and options that name where something will be written.

Standard library only: the history store, which other users' plain Python reads, uses it.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import tempfile
from collections.abc import Mapping


class PathError(ValueError):
    """A path key names a user or an environment variable that does not exist; the message
    names the key."""


#: ``$NAME`` or ``${NAME}`` (what ``os.path.expandvars`` expands).
_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})")


def expand(value: str, key: str, env: Mapping[str, str] | None = None, where: str = "") -> str:
    """``value`` of the path key ``key`` with a leading ``~`` or ``~user`` and every
    ``$NAME``/``${NAME}`` expanded from ``env`` (default: this process's environment).
    :class:`PathError` naming the key when a user or a variable does not exist (``where``:
    the host, in the message)."""
    env = os.environ if env is None else env
    on = f" on {where}" if where else ""
    text = value
    if text.startswith("~"):
        user, sep, rest = text[1:].partition("/")
        if not user:
            home = env.get("HOME") or _home_of(None)
        else:
            home = _home_of(user)
            if home is None:
                raise PathError(
                    f"{key}: {value!r} names the home of user {user!r}, who does not exist{on}: "
                    "give an existing user's (~name), your own (~) or a path without ~"
                )
        text = home.rstrip("/") + (sep + rest if sep else "") if home else text
    unset = [
        match.group(1).strip("{}")
        for match in _VARIABLE.finditer(text)
        if match.group(1).strip("{}") not in env
    ]
    if unset:
        names = ", ".join(f"${name}" for name in dict.fromkeys(unset))
        raise PathError(
            f"{key}: {value!r} names the environment variable(s) {names}, not set{on}: set "
            "it (export it before running Snakemake) or write the path out"
        )
    return _VARIABLE.sub(lambda m: env[m.group(1).strip("{}")], text)


def _home_of(user: str | None) -> str | None:
    """The home directory of ``user`` (None: this process's user), None if there is none."""
    try:
        return pwd.getpwnam(user).pw_dir if user else pwd.getpwuid(os.getuid()).pw_dir
    except (KeyError, OSError):
        return None


def cannot_make_in(folder: str | os.PathLike[str]) -> str | None:
    """Why nothing can be made in the existing folder ``folder``, in words; None when a
    folder can. Tried for real (a temporary folder, made and removed at once: nothing is left
    behind), not with ``os.access``, which grants root every folder, ``/proc`` included. A
    virtual file system (``/proc``, ``/sys``) refuses with "No such file or directory" although
    the folder is there: said as what it is."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".clusterbench-check-", dir=folder))
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.isdir(folder):
            return (
                "its file system makes no files or folders of users (a virtual file system, "
                "such as /proc or /sys)"
            )
        return exc.strerror or str(exc)
    return None
