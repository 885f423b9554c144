"""Unit tests for leakcheck_spark.normalize (no Spark needed)."""

from __future__ import annotations

import doctest
import hashlib
import itertools
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from leakcheck_spark import normalize as nz
from leakcheck_spark.errors import BAD_VALUE, USAGE, LeakcheckError
from leakcheck_spark.normalize import (
    LANGS,
    NORMALIZERS,
    detect_lang,
    key_series,
    normalize,
    normalize_series,
    strip_comments,
    text_key,
    tokens,
    unit_series,
)

PY_SNIPPET = '''import os
from collections import OrderedDict

# Build the index.
class Index:
    """Doc # not a comment."""

    def add(self, key):  # add one
        if key:
            self.keys.append(key)  # remember
        s = '#'
        return s
'''

C_SNIPPET = """#include <stdio.h>

/* Entry point.
 * Prints a URL.
 */
int main(int argc, char **argv) {
    const char *u = "http://example.org/*x*/";  // the URL
    if (argc > 1) {
        printf("%s\\n", u);
    }
    return 0;
}
"""


def test_constants():
    assert NORMALIZERS == ("exact", "whitespace", "code")
    assert LANGS == ("c", "python", "auto")


def test_normalisers_work_without_spark():
    # The plain-Python normalisers import no pyspark (only their Spark wrapper does, lazily).
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "from leakcheck_spark.normalize import normalize\n"
            "assert normalize('a  b // c', 'code') == 'ab'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_doctests():
    result = doctest.testmod(nz)
    assert result.attempted > 5
    assert result.failed == 0


# --- normalisers ----------------------------------------------------------------


def test_exact_keeps_text():
    text = " a\tb \n/* c */ "
    assert normalize(text, "exact") == text
    assert normalize(text, "exact", max_chars=3) == " a\t"


def test_whitespace_default_normalizer():
    assert normalize(" a b ") == "ab"


@pytest.mark.parametrize(
    "text",
    ["a b", "a\tb", "a\r\nb", "a\xa0b", "a\u2003b", " \t a \x0b\x0c b\n", "a\u3000b", "\na\n\nb"],
)
def test_whitespace_removes_all_unicode_whitespace(text):
    assert normalize(text, "whitespace") == "ab"


def test_whitespace_keeps_non_whitespace():
    # zero-width space is not whitespace for str.split
    assert normalize("a\u200bb c", "whitespace") == "a\u200bbc"


def test_code_c_strips_comments_and_whitespace():
    text = "int x = 1; // one\n/* two\n lines */ int y;"
    assert normalize(text, "code", "c") == "intx=1;inty;"


def test_code_python_strips_comments_and_whitespace():
    assert normalize("x = 1  # one\ny = '#'\n", "code", "python") == "x=1y='#'"


def test_code_c_does_not_strip_hash():
    assert normalize("x = 1  # one", "code", "c") == "x=1#one"


def test_code_python_does_not_strip_slashes():
    assert normalize("x = a // b  /* c */", "code", "python") == "x=a//b/*c*/"


@pytest.mark.parametrize("normalizer", NORMALIZERS)
@pytest.mark.parametrize("lang", LANGS)
def test_none_is_none(normalizer, lang):
    assert normalize(None, normalizer, lang) is None
    assert normalize(float("nan"), normalizer, lang) is None
    assert tokens(None, normalizer, lang) == []


@pytest.mark.parametrize("normalizer", NORMALIZERS)
def test_empty_and_blank(normalizer):
    assert normalize("", normalizer) == ""
    if normalizer != "exact":
        assert normalize(" \n\t", normalizer) == ""


def test_comment_only_code_is_empty():
    assert normalize("// only a comment\n/* and this */", "code", "c") == ""
    assert normalize("# only a comment\n", "code", "python") == ""
    assert text_key(normalize("# x", "code", "python")) is None


# --- max_chars --------------------------------------------------------------------


def test_max_chars_truncates_before_normalising():
    assert normalize("ab cd", "whitespace", max_chars=3) == "ab"
    assert normalize("ab cd", "whitespace", max_chars=4) == "abc"
    assert normalize("ab cd", "whitespace", max_chars=100) == "abcd"
    # a comment cut short by truncation is still a comment; a string cut
    # short is an unterminated string
    assert normalize("x; /* long comment */ y;", "code", "c", max_chars=8) == "x;"
    assert normalize('s = "a // b"; // c', "code", "c", max_chars=9) == 's="a//'


def test_max_chars_counts_characters_not_bytes():
    assert normalize("éé é", "whitespace", max_chars=3) == "éé"


def test_max_chars_applies_to_tokens():
    assert tokens("ab cd ef", max_chars=4) == ["ab", "c"]
    assert tokens("x // y", "code", max_chars=4) == ["x"]  # "x //"
    assert tokens("x // y", "code", max_chars=3) == ["x", "/"]  # "x /"


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_max_chars_invalid(bad):
    with pytest.raises(LeakcheckError, match="max_chars .* expected None or a positive integer"):
        normalize("abc", max_chars=bad)
    with pytest.raises(LeakcheckError, match="max_chars") as info:
        key_series(pd.Series(["abc"]), "whitespace", "c", bad)
    assert info.value.code == USAGE


def test_max_chars_numpy_int():
    assert normalize("ab cd", max_chars=np.int64(3)) == "ab"


# --- validation ---------------------------------------------------------------------


# The library's one error type (STYLE rule 5), with the code the CLI would print: a bad option
# is a usage error, a text that is not a string a bad value.  Before: ValueError and TypeError
# (or AttributeError from text_key, "not iterable" from strip_comments).


def test_unknown_normalizer():
    with pytest.raises(LeakcheckError, match="normalizer 'lower' is not valid: expected one of "
                                             "exact, whitespace, code") as info:
        normalize("a", "lower")
    assert info.value.code == USAGE
    with pytest.raises(LeakcheckError, match="normalizer"):
        tokens("a", "lower")
    with pytest.raises(LeakcheckError, match="normalizer"):
        normalize_series(pd.Series(["a"]), "lower", "c", None)
    with pytest.raises(LeakcheckError, match="normalizer"):
        key_series(pd.Series(["a"]), "lower", "c", None)


def test_unknown_lang():
    with pytest.raises(LeakcheckError, match="lang 'java' is not valid: expected one of c, "
                                             "python, auto") as info:
        strip_comments("a", "java")
    assert info.value.code == USAGE
    with pytest.raises(LeakcheckError, match="lang"):
        normalize("a", "code", "java")
    # the lang is validated even when the normaliser ignores it
    with pytest.raises(LeakcheckError, match="lang"):
        normalize("a", "whitespace", "java")
    with pytest.raises(LeakcheckError, match="lang"):
        key_series(pd.Series(["a"]), "code", "java", None)


@pytest.mark.parametrize("call", [
    lambda t: normalize(t), lambda t: tokens(t), lambda t: text_key(t),
    lambda t: strip_comments(t), lambda t: detect_lang(t),
    lambda t: key_series(pd.Series(["ok", t]), "whitespace", "c", None),
    lambda t: unit_series(pd.Series(["ok", t]), "code", "c", None),
])
def test_non_string_rejected(call):
    with pytest.raises(LeakcheckError, match="a text must be a str.*, not bytes: b'abc'") as info:
        call(b"abc")
    assert info.value.code == BAD_VALUE


# --- C comment stripping ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a; // c\nb;", "a; \nb;"),  # the newline ending a // comment is kept
        ("a; // c", "a; "),
        ("a /* x */ b", "a  b"),
        ("a /* x\n y\n */ b", "a  b"),  # block comment spanning lines
        ("a /* x */ b /* y */ c", "a  b  c"),  # non-greedy
        ("a /** x **/ b/***/c/**/d", "a  bcd"),  # stars next to the delimiters
        ("a /* x * y / z */ b", "a  b"),
        ("a /* unterminated\n x; // y\n", "a "),  # runs to end of text
        ("a /* unterminated *", "a "),
        ("a /*/ b */ c", "a  c"),  # "/*/" does not close
        ('s = "//x /*y*/";', 's = "//x /*y*/";'),  # comment starts in a string
        ('u = "http://example.org"; // c', 'u = "http://example.org"; '),
        ('s = "a\\"//b"; // c', 's = "a\\"//b"; '),  # escaped quote
        ('s = "a\\\\"; // c', 's = "a\\\\"; '),  # escaped backslash closes
        ("c = '\"'; // c", "c = '\"'; "),  # char literal holding a quote
        ("c = '\\''; // c", "c = '\\''; "),  # escaped apostrophe
        ("c = '/'; d = '*'; /* c */", "c = '/'; d = '*'; "),
        ("c = '\"'; s = \"'\"; // c", "c = '\"'; s = \"'\"; "),
        # an unterminated literal ends at the newline
        ('s = "open // x\ny; // c', 's = "open // x\ny; '),
        ("c = 'x // y\nz; // c", "c = 'x // y\nz; "),
        ('"abc\\', '"abc\\'),  # lone backslash at the end
        ("a / b / c", "a / b / c"),  # division is not a comment
        ("x = 1 # not a comment in C", "x = 1 # not a comment in C"),
        ("", ""),
    ],
)
def test_strip_comments_c(text, expected):
    assert strip_comments(text, "c") == expected
    assert strip_comments(text) == expected  # c is the default


def test_strip_comments_c_string_with_comment_then_code():
    text = 'printf("/* not */"); /* yes */ x = "*/"; // z'
    assert strip_comments(text, "c") == 'printf("/* not */");  x = "*/"; '


# --- Python comment stripping -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = 1  # c\ny = 2", "x = 1  \ny = 2"),
        ("# whole line\nx", "\nx"),
        ("s = '#'  # c", "s = '#'  "),
        ('s = "#"  # c', 's = "#"  '),
        ('s = "it\'s # x"  # c', 's = "it\'s # x"  '),
        ("s = 'say \"#\"'  # c", "s = 'say \"#\"'  "),
        ('s = "a\\"#b"  # c', 's = "a\\"#b"  '),  # escaped quote
        ("s = 'a\\'#b'  # c", "s = 'a\\'#b'  "),
        ("s = '' # c", "s = '' "),
        ('s = "" # c', 's = "" '),
        # triple-quoted strings span lines and may hold quotes and "#"
        ('s = """a # b\n"x" \'y\' # c\n"""  # d', 's = """a # b\n"x" \'y\' # c\n"""  '),
        ("s = '''a\n# b ' '' \"\n'''  # c", "s = '''a\n# b ' '' \"\n'''  "),
        ('s = """a \\""" # b"""  # c', 's = """a \\""" # b"""  '),  # escaped quote
        ('s = """a""""#x"  # c', 's = """a""""#x"  '),  # 4th quote opens a new string
        ('s = """unterminated # x\ny  # z', 's = """unterminated # x\ny  # z'),
        # an unterminated single-quoted string ends at the newline
        ("s = 'open # x\ny  # c", "s = 'open # x\ny  "),
        ("x = a // b  /* c */", "x = a // b  /* c */"),  # not Python comments
        ("", ""),
    ],
)
def test_strip_comments_python(text, expected):
    assert strip_comments(text, "python") == expected


def test_docstrings_are_kept():
    text = 'def f():\n    """Doc # x."""\n    return 1  # one\n'
    assert strip_comments(text, "python") == 'def f():\n    """Doc # x."""\n    return 1  \n'


def test_stripping_large_inputs_is_linear():
    # pathological inputs that would explode with a backtracking-prone pattern
    n = 20000
    for text in ['"' + "\\x" * n, "/*" + "*a" * n, '"""' + '"' * n, "'" * n, ";//" * n, ":#" * n]:
        for lang in LANGS:
            strip_comments(text, lang)
        detect_lang(text)


# --- auto ---------------------------------------------------------------------------------


def test_detect_lang_typical():
    assert detect_lang(PY_SNIPPET) == "python"
    assert detect_lang(C_SNIPPET) == "c"


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("import numpy as np\n", "python"),
        ("from a.b import c\n", "python"),
        ("for x in y:\n    print(x)\n", "python"),
        ("# a comment\nx = 1\n", "python"),
        ("x = 1\n", "c"),  # no signal at all: c
        ("", "c"),
        ("x = 1;\n", "c"),
        ("#include <a.h>\n", "c"),
        ("#  define X 1\n#  define Y 2\n", "c"),
        ("// comment\nint x;\n", "c"),
        ("int f() {\n  return 1;\n}\n", "c"),
        # a dict opener is not a C block; the "if" line is
        ("d = {\n    'a': 1,\n}\nif d:\n    pass\n", "python"),
        ("switch (x) {\ncase 1:\n    y();\n}\n", "c"),
        # a comment after code is Python's; a macro's "#x" and "a ## b" are not comments
        ("w = 1  # note\n", "python"),
        ('s = "#"\nw = 1\t# note\n', "python"),
        ("#define STR(x) #x\n#define CAT(a, b) a ## b\n", "c"),
        ("  # define X 1\n", "c"),
        ("x = 1; // see # 5\n", "c"),
    ],
)
def test_detect_lang_cases(text, lang):
    assert detect_lang(text) == lang


def test_detect_lang_is_deterministic():
    assert {detect_lang(PY_SNIPPET) for _ in range(5)} == {"python"}


def test_auto_equals_explicit_lang():
    for text, lang in [(PY_SNIPPET, "python"), (C_SNIPPET, "c")]:
        assert strip_comments(text, "auto") == strip_comments(text, lang)
        assert normalize(text, "code", "auto") == normalize(text, "code", lang)
        assert tokens(text, "code", "auto") == tokens(text, "code", lang)
        assert key_series(pd.Series([text]), "code", "auto", None)[0] == text_key(
            normalize(text, "code", lang)
        )


def test_auto_snippets_strip_the_right_comments():
    py = normalize(PY_SNIPPET, "code", "auto")
    assert "Buildtheindex" not in py and "addone" not in py and "remember" not in py
    assert '"""Doc#notacomment."""' in py and "s='#'" in py
    c = normalize(C_SNIPPET, "code", "auto")
    assert "Entrypoint" not in c and "theURL" not in c
    assert '"http://example.org/*x*/"' in c and "#include<stdio.h>" in c


def test_auto_without_comment_starters_is_identity():
    assert strip_comments("a = b\n", "auto") == "a = b\n"


# --- tokens -------------------------------------------------------------------------------


def test_tokens_regex():
    assert tokens("foo(bar, 42) + x_1;") == ["foo", "(", "bar", ",", "42", ")", "+", "x_1", ";"]
    assert tokens("a==b") == ["a", "=", "=", "b"]
    assert tokens("héllo wörld") == ["héllo", "wörld"]  # \w is Unicode
    assert tokens("  \t\n") == []
    assert tokens("") == []


def test_tokens_code_strips_comments_but_keeps_word_boundaries():
    assert tokens("int x; // note\nint y;", "code", "c") == ["int", "x", ";", "int", "y", ";"]
    assert tokens("x = 1  # note", "code", "python") == ["x", "=", "1"]


def test_tokens_raw_for_other_normalizers():
    # comments are only stripped for "code"
    expected = ["x", "/", "/", "y"]
    assert tokens("x // y", "whitespace") == expected
    assert tokens("x // y", "exact") == expected


# --- text_key ----------------------------------------------------------------------------


def test_text_key():
    key = text_key("abc")
    assert isinstance(key, bytes) and len(key) == 16
    assert key == hashlib.blake2b(b"abc", digest_size=16).digest()
    assert text_key("abc") == key
    assert text_key("abd") != key
    assert text_key("é") == hashlib.blake2b("é".encode(), digest_size=16).digest()
    assert text_key("") is None
    assert text_key(None) is None


def test_text_key_lone_surrogate_does_not_raise():
    assert len(text_key("a\udc80")) == 16


# --- pandas helpers ---------------------------------------------------------------------


def _series():
    return pd.Series(
        ["a b", None, np.nan, "", "  ", "x // c", "a\tb"],
        index=[10, 11, 12, 13, 14, 15, 16],
        dtype=object,
    )


def test_normalize_series():
    out = normalize_series(_series(), "whitespace", "c", None)
    assert out.dtype == object
    assert list(out.index) == [10, 11, 12, 13, 14, 15, 16]
    assert out.tolist() == ["ab", None, None, "", "", "x//c", "ab"]
    out = normalize_series(_series(), "code", "c", 2)
    assert out.tolist() == ["a", None, None, "", "", "x", "a"]


@pytest.mark.parametrize("normalizer", NORMALIZERS)
@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("max_chars", [None, 1, 4])
def test_key_series_matches_scalar(normalizer, lang, max_chars):
    texts = _series()
    out = key_series(texts, normalizer, lang, max_chars)
    assert out.dtype == object
    assert out.index.equals(texts.index)
    expected = [
        text_key(normalize(None if isinstance(t, float) else t, normalizer, lang, max_chars))
        for t in texts
    ]
    assert out.tolist() == expected


def test_key_series_values():
    out = key_series(_series(), "whitespace", "c", None)
    ab = text_key("ab")
    assert out.tolist() == [ab, None, None, None, None, text_key("x//c"), ab]
    assert all(len(k) == 16 for k in out if k is not None)
    assert out[10] == out[16]  # equal normalised text, equal key


def test_series_helpers_accept_string_dtype_with_na():
    texts = pd.Series(["a b", pd.NA, None], dtype="string")
    assert normalize_series(texts, "whitespace", "c", None).tolist() == ["ab", None, None]
    assert key_series(texts, "whitespace", "c", None).tolist() == [text_key("ab"), None, None]


def test_series_helpers_empty_series():
    empty = pd.Series([], dtype=object)
    assert len(key_series(empty, "code", "auto", None)) == 0
    assert len(normalize_series(empty, "exact", "c", None)) == 0


UNIT_TEXTS = ["ab c d", "a bc d", "a  bc\td", "a+b", "a + b", "a\u00a0bc d", "x = 1  # c",
              "x = 1 // c", "x =1", "  ", "", None, "ab\x1cc", "ab c\nd # tail", "ab\tc d",
              # Lone surrogates (JSON "\ud800"): Arrow refuses them, the batch is joined in Python.
              "a\ud800 b", "a \ud800b"]


@pytest.mark.parametrize("normalizer", NORMALIZERS)
@pytest.mark.parametrize("lang", ["c", "python"])
@pytest.mark.parametrize("max_chars", [None, 3])
def test_a_unit_fixes_the_tokens_and_lies_within_a_key(normalizer, lang, max_chars):
    texts = pd.Series(UNIT_TEXTS, dtype=object)
    units = unit_series(texts, normalizer, lang, max_chars).tolist()
    keys = key_series(texts, normalizer, lang, max_chars).tolist()
    assert [u is None for u in units] == [k is None for k in keys]
    for i, j in itertools.combinations(range(len(UNIT_TEXTS)), 2):
        if units[i] is not None and units[i] == units[j]:
            assert keys[i] == keys[j]
            assert (tokens(UNIT_TEXTS[i], normalizer, lang, max_chars)
                    == tokens(UNIT_TEXTS[j], normalizer, lang, max_chars))
        elif keys[i] is not None and keys[i] == keys[j] and normalizer != "exact":
            # Same key, different units: only where the tokens differ ("ab c", "a bc").
            assert (tokens(UNIT_TEXTS[i], normalizer, lang, max_chars)
                    != tokens(UNIT_TEXTS[j], normalizer, lang, max_chars))
    if normalizer == "exact":
        assert units == keys
    elif max_chars is None:
        # "ab c d" and "a bc d" share a key, not their tokens: two units.
        assert keys[0] == keys[1] and units[0] != units[1] and units[1] == units[2]
        # "a+b" and "a + b" share their tokens: one unit.
        assert units[3] == units[4]


@pytest.mark.parametrize("normalizer", ["whitespace", "code"])
def test_copies_differing_only_in_spacing_are_one_unit(normalizer):
    # A function and its re-formatted copies (spaces around punctuation, not only between
    # whitespace-separated runs) have the same tokens: one unit, so a large duplicate group is
    # signed once and its units are not joined pairwise (SPEC 5).
    texts = pd.Series(["int f(int a, int b) { return a+b; } // x",
                       "int f( int a,int b ){return a + b ;}",
                       "int  f(int a , int b)\n{\n  return a+ b;\n}"], dtype=object)
    units = unit_series(texts, normalizer, "c", None).tolist()
    assert units[1] == units[2] and units[0] is not None
    assert (units[0] == units[1]) == (normalizer == "code")
