"""The suite's own rules (tests/conftest.py): a test that reaches the database says on which, or is refused."""

from __future__ import annotations

import pytest

CONFTEST = """
import pytest
from tests.conftest import pytest_generate_tests  # noqa: F401  (the rule under test)

@pytest.fixture
def database_url(request):
    return request.param
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    databases(*backends): where\n")
    return pytester


def test_a_module_that_reaches_the_database_without_saying_where_is_refused(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_unmarked="def test_it(database_url):\n    pass\n")
    result = suite.runpytest_inprocess("--collect-only", "-q")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*test_unmarked.py::test_it reaches the database: mark its module*"])


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ('"sqlite"', ["test_marked.py::test_it[[]sqlite[]]"]),
        ('"sqlite", "postgresql"', ["test_marked.py::test_it[[]sqlite[]]", "test_marked.py::test_it[[]postgresql[]]"]),
    ],
)
def test_a_marked_module_runs_on_the_databases_it_names(
    suite: pytest.Pytester, marker: str, expected: list[str]
) -> None:
    source = f"import pytest\npytestmark = pytest.mark.databases({marker})\ndef test_it(database_url):\n    pass\n"
    suite.makepyfile(test_marked=source)
    result = suite.runpytest_inprocess("--collect-only", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines(expected)


def test_an_unknown_database_is_refused(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_typo='import pytest\n@pytest.mark.databases("mysql")\ndef test_it(database_url):\n    pass\n')
    result = suite.runpytest_inprocess("--collect-only", "-q")
    assert result.ret != 0
