"""One line instead of a traceback when a tool misses a package: which command installs it.

A package of requirements.txt is installed by `bash scripts/setup.sh`, one of requirements-dev.txt
(tests, record tools, benchmarks, plots) by `bash scripts/setup.sh dev`, both into .venv; a tool
run by another Python (the system's, on a fresh pod) is told to use .venv/bin/python.

    from data.setup_hint import setup_hint

    if __name__ == "__main__":
        with setup_hint():  # ModuleNotFoundError of a listed package -> that line, exit code 1
            sys.exit(main())

Standard library only: it must work where nothing is installed yet.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUP_COMMANDS = (("requirements.txt", ""), ("requirements-dev.txt", " dev"))


def normalize(name: str) -> str:
    """A distribution or import name as PEP 503 compares them: huggingface_hub = huggingface-hub."""
    return re.sub(r"[-_.]+", "-", name).lower()


def listed_in(requirements: Path) -> set[str]:
    """The normalized names a requirements file lists (its own lines; -r includes are not read)."""
    try:
        lines = requirements.read_text().splitlines()
    except OSError:
        return set()
    names = (re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line.strip()) for line in lines)
    return {normalize(m.group(0)) for m in names if m}


def shown(path: Path) -> str:
    """`path` as the user can type it here: relative to the working directory if inside it."""
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def setup_command(module: str) -> str | None:
    """The command that installs the top-level package of `module`, or None if none lists it."""
    wanted = normalize(module.partition(".")[0])
    for requirements, argument in SETUP_COMMANDS:
        if wanted in listed_in(REPO / requirements):
            return f"bash {shown(REPO / 'scripts' / 'setup.sh')}{argument}"
    return None


def missing_package_message(module: str) -> str | None:
    """The line to print for `No module named <module>`, or None for a package we do not list."""
    command = setup_command(module)
    if command is None:
        return None
    name = module.partition(".")[0]
    venv = REPO / ".venv"
    if Path(sys.prefix).resolve() == venv.resolve():
        return f"error: no module named {name!r} in .venv: `{command}` installs it"
    return (
        f"error: no module named {name!r} for {sys.executable}: run `{command}`, then run this "
        f"with {shown(venv / 'bin' / 'python')} (or after `source {shown(venv)}/bin/activate`)"
    )


@contextlib.contextmanager
def setup_hint() -> Iterator[None]:
    """Turn a ModuleNotFoundError of a package we list into SystemExit with its one line."""
    try:
        yield
    except ModuleNotFoundError as exc:
        message = missing_package_message(exc.name or "")
        if message is None:
            raise
        raise SystemExit(message) from None
