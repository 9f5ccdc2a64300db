"""`make lint`'s rule of the test tree (scripts/check_test_tree.py): tests/ mirrors the packages.
The tree keeps it, and the check names a folder or file that breaks it."""

import importlib.util

from support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "check_test_tree.py"
spec = importlib.util.spec_from_file_location("check_test_tree", SCRIPT)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_the_test_tree_mirrors_the_packages():
    assert check.main() == 0


def test_a_folder_that_is_no_package_and_a_stray_file_are_named(tmp_path, monkeypatch):
    (tmp_path / "rmq_spark" / "client").mkdir(parents=True)
    (tmp_path / "rmq_spark" / "client" / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    for folder in ("rmq_spark/client", "rmq_spark/clients", "server", "support"):
        (tests / folder).mkdir(parents=True)
        (tests / folder / "test_x.py").write_text("")
    (tests / "rmq_spark" / "clients" / "data").mkdir()  # no tests of its own: left alone
    (tests / "conftest.py").write_text("")
    (tests / "test_loose.py").write_text("")
    monkeypatch.setattr(check, "ROOT", tmp_path)
    monkeypatch.setattr(check, "TESTS", tests)
    (tests / "rmq_wire").mkdir()
    (tests / "broker_sim").mkdir()
    assert check.main() == 1
    assert check.problems() == [
        "tests/server/: names no package; use tests/<package path>/ (rmq_wire, broker_sim, rmq_spark) or one of "
        "end_to_end, fuzz, peers, support",
        "tests/test_loose.py: a test file at the top of tests/; move it beside the package it tests "
        "(tests/<package>/...), or to tests/end_to_end, tests/support",
        "tests/rmq_spark/clients/: there is no package rmq_spark.clients; tests sit beside the package they test"]
