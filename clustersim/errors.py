"""The exceptions clustersim raises.

InputError is what the command line reports with exit status 2: a missing or unreadable file,
bad YAML, an unknown key, a wrong type or unit, an impossible layout. It is a ValueError, and
carries where the problem is (file, line, column; 0 when unknown) and what would be accepted.
SimulationError is an internal failure (the command line's exit status 1).
"""

import re

# What follows these in a message is what would be accepted (sim/config/document.cpp's wording).
_EXPECTED = r"(?:expected (?:one of )?|accepted keys here: )([^;()]*)"

__all__ = ["InputError", "SimulationError"]


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
    """Bad input, located: `file`, `line`, `column` (1-based; 0 when unknown), `message` (what was
    wrong, without the location), `expected` (the text after "expected", or "") and `accepted`
    (the accepted names when the message lists them, else [])."""

    def __init__(self, text, message="", file="", line=0, column=0):
        super().__init__(text)
        self.message = message or text
        self.file = file
        self.line = line
        self.column = column
        found = re.findall(_EXPECTED, self.message)
        self.expected = found[-1].strip() if found else ""
        self.accepted = _accepted(self.message)

    def __reduce__(self):
        return (type(self), (str(self), self.message, self.file, self.line, self.column))


class SimulationError(RuntimeError):
    """An internal failure of the simulation (a broken invariant; please report it)."""
