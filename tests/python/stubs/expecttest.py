"""Minimal stand-in for the `expecttest` package (pypi expecttest), which Debian does not ship but
torch.testing._internal.common_utils (torch 1.13) imports. common_utils uses only
`expecttest.ACCEPT` (a bool, set from its --accept option) and `expecttest.TestCase` (the base of
its TestCase). dist_suite.py puts this folder on sys.path only when the real module is missing.

assertExpectedInline compares against the inline string (normalised like expecttest does: the
common indentation and the surrounding newlines removed); it cannot rewrite the caller's source
(ACCEPT is ignored). None of the distributed tests call it."""
import textwrap
import unittest

ACCEPT = False


def _normalize(s):
    return textwrap.dedent(s).strip("\n")


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertMultiLineEqual(_normalize(expect), _normalize(actual))

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        try:
            callable(*args, **kwargs)
        except exc_type as e:
            self.assertExpectedInline(str(e), expect)
            return
        self.fail(msg="Did not raise when expected to")
