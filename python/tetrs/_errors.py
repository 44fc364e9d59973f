"""Exceptions raised by tetrs: the message tet-host prints, its exit status, the error
category and, when there is one, the finding code (``chunk-checksum``, ...)."""


class TetError(Exception):
    """An error reading, checking, folding or writing a .tet file.

    ``exit`` is the status ``tet-host`` ends with for the same error (4 damaged input,
    8 operational, 16 usage); ``category`` is the error's category (``corrupt``,
    ``truncated``, ``usage``, ``resource``, ...); ``code`` the finding code or None.
    """

    def __init__(self, message, exit=8, category="io", code=None):
        super().__init__(message)
        self.message = message
        self.exit = exit
        self.category = category
        self.code = code

    def __reduce__(self):
        return (type(self), (self.message, self.exit, self.category, self.code))


class MemoryBudgetError(TetError, MemoryError):
    """The memory budget does not allow the call; the message says how to raise it
    (``memory_budget=`` in Python, ``--memory-budget`` on the command line)."""
