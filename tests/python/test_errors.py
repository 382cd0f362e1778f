"""absl status codes map to the documented Python exceptions, and messages
name the column or path."""

import numpy as np
import pytest

import flywheel


@pytest.fixture
def table(table_path):
    t = flywheel.Table.create(table_path, {"x": "int64", "s": "string", "e": "float32[2]?"})
    t.append({"x": [1, 2, 3], "s": ["a", "b", "c"], "e": np.zeros((3, 2), np.float32)})
    return t


def test_missing_table_is_file_not_found(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=f"no flywheel table at {missing}"):
        flywheel.Table.open(missing)


def test_existing_table_is_file_exists(table):
    with pytest.raises(FileExistsError, match=f"a table already exists at {table.path}"):
        flywheel.Table.create(table.path, {"x": "int64"})


def test_bad_schema_and_options_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="column 'x'"):
        flywheel.Table.create(str(tmp_path / "a"), {"x": "int65"})
    with pytest.raises(ValueError):
        flywheel.Table.create(str(tmp_path / "b"), "x:int64, x:int32")
    with pytest.raises(ValueError):
        flywheel.Table.create(str(tmp_path / "c"), {"x": "int64"}, codec="snappy")
    with pytest.raises(ValueError, match="page"):
        flywheel.Table.create(str(tmp_path / "d"), {"x": "int64"}, page_size=10)
    with pytest.raises(TypeError):
        flywheel.Table.create(str(tmp_path / "e"), ["x"])


def test_out_of_range_rows_are_index_errors(table):
    with pytest.raises(IndexError, match=r"row 3 is outside \[0, 3\)"):
        table.take([3])
    with pytest.raises(IndexError, match=f"row -1 is outside.*{table.path}"):
        table.take([-1])
    with pytest.raises(IndexError):
        table.delete([7])
    with pytest.raises(TypeError, match="integers"):
        table.take([0.5])


def test_unknown_columns_are_key_errors_naming_column_and_table(table):
    for call in (lambda: table.take([0], ["nope"]),
                 lambda: table.scan(columns=["x", "nope"]),
                 lambda: table.append({"x": [1], "s": ["a"], "nope": [1]}),
                 lambda: table.delete(where="nope > 1")):
        with pytest.raises(KeyError, match=f"no column 'nope' in table {table.path}"):
            call()
    assert table.version == 2


def test_bad_data_names_the_column(table):
    with pytest.raises(ValueError, match="column 's' has 1 rows but column 'x' has 2"):
        table.append({"x": [1, 2], "s": ["a"]})
    with pytest.raises(ValueError, match=r"column 'e' \(float32\[2\]\): values have shape \(2, 3\)"):
        table.append({"x": [1, 2], "s": ["a", "b"], "e": np.zeros((2, 3), np.float32)})
    with pytest.raises(ValueError, match="column 's'.*row 1 is None but the column is not nullable"):
        table.append({"x": [1, 2], "s": ["a", None]})
    with pytest.raises(ValueError, match="column 'x'.*row 0 is null but the column is not nullable"):
        table.append({"x": np.ma.masked_array([1, 2], mask=[True, False]), "s": ["a", "b"]})
    with pytest.raises(TypeError, match="column 's'.*row 0 is bytes, need str"):
        table.append({"x": [1], "s": [b"a"]})
    with pytest.raises(TypeError, match="column 's'"):
        table.append({"x": [1], "s": "a"})
    with pytest.raises(ValueError, match="column 'x' is missing and is not nullable"):
        table.append({"s": ["a"]})
    with pytest.raises(ValueError, match="no columns"):
        table.append({})
    with pytest.raises(TypeError):
        table.append([1, 2])
    assert table.version == 2 and table.num_rows == 3


def test_bad_predicates_are_value_errors(table):
    with pytest.raises(ValueError):
        table.delete(where="x ~ 3")
    with pytest.raises(ValueError, match="'s'"):
        table.delete(where="s > 3")


def test_commit_conflict_is_a_runtime_error_naming_both_operations(table):
    table.append({"x": [4], "s": ["d"]})
    deleter = flywheel.Table.open(table.path)
    compactor = flywheel.Table.open(table.path)
    assert compactor.compact() == 2
    with pytest.raises(flywheel.CommitConflict, match="delete.*compact") as info:
        deleter.delete([1])
    assert isinstance(info.value, RuntimeError)
    assert flywheel.CommitConflict.__module__ == "flywheel"
    assert flywheel.Table.open(table.path).num_rows == 4


def test_missing_version_and_tag(table):
    with pytest.raises(FileNotFoundError, match="has no version 5"):
        flywheel.Table.open(table.path, version=5)
    with pytest.raises(FileNotFoundError):
        table.checkout(5)
    with pytest.raises(FileNotFoundError, match="cannot tag version 9"):
        table.tag("t", version=9)
    with pytest.raises(ValueError):
        flywheel.Table.open(table.path, version=1, tag="x")
