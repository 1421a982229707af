"""The exceptions clustersim raises.

InputError is what the command line reports with exit status 2: a missing or unreadable file,
bad YAML, an unknown key, a wrong type or unit, an impossible layout, or a bad argument to a
clustersim function. It is a ValueError, and carries where the problem is (the argument, or the
file, line, column; 0 when unknown) and what would be accepted. ArgumentTypeError is an
InputError that is also a TypeError: an argument of the wrong type. SimulationError is an
internal failure (the command line's exit status 1). SweepInterrupted is the KeyboardInterrupt a
sweep stopped by Ctrl-C raises, with the rows it finished.
"""

import re

# What follows these in a message is what would be accepted (sim/config/document.cpp's wording).
_EXPECTED = r"(?:expected (?:one of )?|accepted keys here: )([^;()]*)"

__all__ = ["InputError", "ArgumentTypeError", "SimulationError", "SweepInterrupted"]


def _accepted(message):
    """The alternatives named by the last "expected ..." (or "accepted keys here: ...") of a
    message, when they are names.

    "unknown value "x"; expected gpipe, 1f1b or interleaved" -> ["gpipe", "1f1b", "interleaved"];
    "unknown key 'a.b'; accepted keys here: tp, pp or dp" -> ["tp", "pp", "dp"];
    "expected a whole number, found "x"" -> [] (a description, not a list of names).
    """
    found = re.findall(_EXPECTED, message)
    if not found:
        return []
    phrase = found[-1].strip().rstrip(".")
    names = [n.strip() for n in re.split(r",\s*|\s+or\s+", phrase) if n.strip()]
    if len(names) < 2 or any(" " in n for n in names):
        return []
    return names


class InputError(ValueError):
    """Bad input, located: `argument` (the name of the clustersim function's argument that was
    wrong, or "" when the input is in a file or an override), `file`, `line`, `column` (1-based;
    0 when unknown), `message` (what was wrong, without the location), `expected` (the text after
    "expected", or "") and `accepted` (the accepted names when the message lists them, else [])."""

    def __init__(self, text, message="", file="", line=0, column=0, argument=""):
        super().__init__(text)
        self.message = message or text
        self.file = file
        self.line = line
        self.column = column
        self.argument = argument
        found = re.findall(_EXPECTED, self.message)
        self.expected = found[-1].strip() if found else ""
        self.accepted = _accepted(self.message)

    @classmethod
    def of_argument(cls, argument, message):
        """The error of a function's `argument`: "schedule: unknown schedule ..."."""
        return cls("%s: %s" % (argument, message), message, argument=argument)

    def __reduce__(self):
        return (type(self), (str(self), self.message, self.file, self.line, self.column,
                             self.argument))


class ArgumentTypeError(InputError, TypeError):
    """An argument of the wrong type ("fast_paths: expected a bool, not str"): an InputError
    (so a ValueError) and a TypeError, so that either `except` catches it."""


class SimulationError(RuntimeError):
    """An internal failure of the simulation (a broken invariant; please report it)."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a KeyboardInterrupt raised by the progress callback) stopped a sweep.
    `partial` is a clustersim.Sweep of the combinations that finished (ranked as a whole sweep
    ranks them, `interrupted` True). In a notebook, after the cell stops: sys.last_value.partial.
    """

    def __init__(self, partial):
        super().__init__("sweep interrupted after %d of %d combinations; the finished rows are in "
                         "this exception's .partial" % (len(partial), partial.total))
        self.partial = partial

    def __reduce__(self):
        return (type(self), (self.partial,))
