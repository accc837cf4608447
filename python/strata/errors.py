"""Exceptions of the strata binding.

Every failure is a StrataError carrying ``result`` (a strata.Result, the strataResult_t) and
``message`` (strataGetLastError's line, or the binding's own explanation when the binding caught
the problem before calling into C). Bad input caught by the binding is also a TypeError or
ValueError, so ordinary Python handlers work:

    UnsupportedTypeError(StrataError, TypeError)   a dtype, layout or object strata cannot take
    InvalidArgumentError(StrataError, ValueError)  non-contiguous, read-only, CUDA tensor,
                                                   sizes that do not match, bad rank or root
    ClosedError(StrataError)                       a destroyed or aborted communicator or stream
                                                    (result strataInvalidUsage)
"""

from ._lib import Result, RESULT_C_NAMES


class StrataError(Exception):
    """A strata call failed.

    Attributes:
        result:   strata.Result (IntEnum of strataResult_t), e.g. Result.TIMEOUT.
        message:  one line: strataGetLastError's text for a failure inside the library, else the
                  binding's explanation.
        function: the C function (``"strataAllReduce"``) or binding method that failed.
    """

    def __init__(self, result, message, function=None):
        try:
            result = Result(result)
        except ValueError:
            pass
        self.result = result
        self.message = message
        self.function = function
        name = RESULT_C_NAMES.get(result, "result %d" % int(result))
        text = "%s: %s" % (name, message) if message else name
        if function:
            text = "%s: %s" % (function, text)
        super().__init__(text)


class UnsupportedTypeError(StrataError, TypeError):
    """A buffer or argument of a type strata cannot take (result strataInvalidArgument)."""

    def __init__(self, message, function=None):
        super().__init__(Result.INVALID_ARGUMENT, message, function)


class InvalidArgumentError(StrataError, ValueError):
    """A buffer or value strata cannot use as given (result strataInvalidArgument)."""

    def __init__(self, message, function=None):
        super().__init__(Result.INVALID_ARGUMENT, message, function)


class ClosedError(StrataError):
    """The communicator or stream was destroyed or aborted (result strataInvalidUsage)."""

    def __init__(self, message, function=None):
        super().__init__(Result.INVALID_USAGE, message, function)
