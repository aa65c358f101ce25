"""The one exception the command line turns into `error: ...` and exit code 2."""


class SubmissionError(Exception):
    """A user mistake (bad path, unreadable log, missing option): reported once, exit code 2."""


class MissingPackage(SubmissionError):
    """A tool needs a package that is not installed (python-minifier, brotli): `check` reports
    it as advice, not as a broken rule."""
