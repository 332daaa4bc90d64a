"""The one exception base for user errors.

Anything raised as a :class:`UserError` (bad flags, files, recipes, models; a collection, index
or run that does not fit the command) is printed by every command line as one ``error:`` line
with exit code 2; anything else is a programming error and keeps its traceback. It subclasses
``ValueError`` so library callers that catch ``ValueError`` keep working.
"""

from __future__ import annotations


class UserError(ValueError):
    """Input the user can fix; the message says what and, where it can, how."""
